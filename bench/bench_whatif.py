"""A 10-stage what-if at C up to 1024 on one core: the CPU seconds it takes (target < 30 s).

    .venv/bin/python bench/bench_whatif.py [--preset qwen35-397b-8gpu] [--mixed]

Predicts the default 1000-in/1000-out sweep C = 2, 4, ... 1024 with the default stage rules
(30 s warmup, 60 s window, turnover) on the bundled preset, in virtual time, and prints the
process CPU time and the wall time. ``--mixed``: the same stages with lengths drawn per request
(input lognormal mean 1000 std 300 clamped 100..4000, output uniform 500..1500) and the default
scenario's 5 s ramp. A benchmark, not a test: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from loadgen.sim.config import load  # noqa: E402
from loadgen.whatif.summary import WhatIf, predict  # noqa: E402
from loadgen.whatif.virtual_sweep import stage_rules  # noqa: E402
from loadgen.whatif.virtual_workload import VirtualWorkload  # noqa: E402
from loadgen.workload.lengths import LengthDist  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="qwen35-397b-8gpu")
    ap.add_argument("--mixed", action="store_true", help="lengths from distributions, 5 s ramp")
    args = ap.parse_args()
    loads = tuple(2 ** k for k in range(1, 11))  # 2 .. 1024: 10 stages
    w = WhatIf(1000, 1000, loads)
    if args.mixed:
        w = WhatIf(1000, 1000, loads, stages=stage_rules(ramp_s=5.0), workload=VirtualWorkload(
            LengthDist("lognormal", mean=1000, std=300, min=100, max=4000), LengthDist("uniform", min=500, max=1500)))
    cpu0, wall0 = time.process_time(), time.perf_counter()
    summary = predict(load(args.preset), w)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    for row in summary["stages"]:
        print(f"C={row['concurrency']:>5}  predicted {row['output_tokens_per_s']:>8.0f} out tok/s  "
              f"TTFT p50 {row['ttft_p50_s'] * 1e3:>8.1f} ms  requests {row['requests']}")
    print(f"bench_whatif: 10 stages up to C=1024{' (mixed lengths)' if args.mixed else ''} predicted in {cpu:.1f} CPU s ({wall:.1f} s wall); target < 30 s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
