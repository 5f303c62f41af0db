"""A 10-stage what-if at C up to 1024 on one core: the CPU seconds it takes (target < 30 s).

    .venv/bin/python bench/bench_whatif.py [--preset qwen35-397b-8gpu]

Predicts the default 1000-in/1000-out sweep C = 2, 4, ... 1024 with the default stage rules
(30 s warmup, 60 s window, turnover) on the bundled preset, in virtual time, and prints the
process CPU time and the wall time. A benchmark, not a test: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from loadgen.predict.whatif import WhatIf, predict  # noqa: E402
from loadgen.sim.config import load  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="qwen35-397b-8gpu")
    args = ap.parse_args()
    loads = tuple(2 ** k for k in range(1, 11))  # 2 .. 1024: 10 stages
    cpu0, wall0 = time.process_time(), time.perf_counter()
    summary = predict(load(args.preset), WhatIf(1000, 1000, loads))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    for row in summary["stages"]:
        print(f"C={row['concurrency']:>5}  predicted {row['output_tokens_per_s']:>8.0f} out tok/s  "
              f"TTFT p50 {row['ttft_p50_s'] * 1e3:>8.1f} ms  requests {row['requests']}")
    print(f"bench_whatif: 10 stages up to C=1024 predicted in {cpu:.1f} CPU s ({wall:.1f} s wall); target < 30 s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
