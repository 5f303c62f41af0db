"""`make demo`: the seeds' sweep against the seeds' simulated server, in about two minutes.

Starts the simulator with the Qwen3.5-397B / 8-GPU preset (1,570,000 KV tokens, SGLang flavor)
sped up by a time scale, runs `locust --headless -f locustfile.py` with the seeds' scenario
(1000 input + 1000 output tokens, C = 1, 2, 4, ... toward 1024) and short stage windows, prints
the per-stage table, and stops the simulator. The guard stopping before C=1024 is the expected
outcome here, so its exit code (3) counts as success.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loadgen.errors import EXIT_GUARD_ABORT  # noqa: E402
from loadgen.sim_process import running_sim  # noqa: E402

TIME_SCALE = os.environ.get("DEMO_TIME_SCALE", "10")
RESULTS = os.environ.get("DEMO_RESULTS", str(ROOT / "results" / "demo"))


def main() -> int:
    extra = sys.argv[1:]
    with running_sim("--preset", "qwen35-397b-8gpu", "--time-scale", TIME_SCALE) as sim:
        print(f"demo: simulator (Qwen3.5-397B, 8 GPUs, time x{TIME_SCALE}) at {sim.url}", flush=True)
        cmd = [
            sys.executable, "-m", "locust", "--headless", "-f", str(ROOT / "locustfile.py"),
            "--host", sim.url, "--scenario", str(ROOT / "config" / "demo.yaml"),
            "--results-dir", RESULTS, "--only-summary", "--loglevel", "WARNING", *extra,
        ]
        code = subprocess.call(cmd, cwd=ROOT)
    if code == EXIT_GUARD_ABORT:
        print("demo: the KV guard stopped the sweep before a stage that does not fit (expected).")
        code = 0
    print(f"demo: results in {RESULTS}/ (summary.json, stages.csv, report.html)")
    return code


if __name__ == "__main__":
    sys.exit(main())
