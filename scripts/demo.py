"""`make demo`: the default sweep against a simulated large server, in two to three minutes.

Starts the simulator with the Qwen3.5-397B / 8-GPU preset (1,570,000 KV tokens, SGLang flavor)
sped up by a time scale, runs `locust --headless -f locustfile.py` with config/demo.yaml
(1000 input + 1000 output tokens, C = 1, 4, 16, ... 1024) and short stage windows, prints
the per-stage table, and stops the simulator. The guard stopping before C=1024 is the expected
outcome here, so its exit code (3) counts as success. The run's summary.json and report.html get
a note that their figures are in the sped-up simulator's wall-clock time (``notes``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loadgen.errors import EXIT_GUARD_ABORT  # noqa: E402
from loadgen.report.files import write_results  # noqa: E402
from loadgen.report.runs import resolve_run_dir  # noqa: E402
from loadgen.sim.launch import running_sim  # noqa: E402

TIME_SCALE = os.environ.get("DEMO_TIME_SCALE", "10")
RESULTS = os.environ.get("DEMO_RESULTS", str(ROOT / "results" / "demo"))


def time_scale_note(scale: float) -> str:
    return (f"The simulated server ran {scale:g}x faster than real time: every figure here is in wall-clock "
            f"time (tok/s {scale:g}x higher, TTFT/ITL {scale:g}x lower than the server's own time; the "
            "console shows both).")


def note_time_scale(run_dir: Path, scale: float) -> None:
    """Add the time-scale note to the run's summary.json and rebuild its report with it."""
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["notes"] = [*summary.get("notes", []), time_scale_note(scale)]
    write_results(run_dir, summary)


def print_simulated_time(summary_path: Path, scale: float) -> None:
    """The table above is in wall-clock time; the simulated server runs `scale` times faster."""
    if not summary_path.exists():
        return
    summary = json.loads(summary_path.read_text())
    print(f"\ndemo: the simulator runs {scale:g}x faster than real time; in the server's own time:")
    print("     C   out tok/s   TTFT p50   ITL p50 (per token)")
    for s in summary["stages"]:
        ttft, itl = s.get("ttft_p50_s"), s.get("itl_p50_s")
        print(f"  {s['concurrency']:>4}  {s['output_tokens_per_s'] / scale:>10,.0f}"
              f"  {'-' if ttft is None else f'{ttft * scale * 1000:>7.0f} ms'}"
              f"  {'-' if itl is None else f'{itl * scale * 1000:>7.1f} ms'}")
    knee = summary["knee"]["concurrency"]
    stop = summary["guard"]["stopped_before"]
    line = f"demo: knee at C={knee}" if knee else "demo: no knee (throughput still rising)"
    if stop:
        line += f"; guard stopped before C={stop} (capacity {summary['guard']['capacity_tokens']:,} tokens)"
    print(line)


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
    run_dir = resolve_run_dir(RESULTS)
    if (run_dir / "summary.json").is_file():
        note_time_scale(run_dir, float(TIME_SCALE))
    print_simulated_time(run_dir / "summary.json", float(TIME_SCALE))
    if code == EXIT_GUARD_ABORT:
        print("demo: the KV guard stopped the sweep before a stage that does not fit (expected).")
        code = 0
    print(f"demo: results in {run_dir}/ (summary.json, stages.csv, report.html); {RESULTS}/latest is the newest")
    return code


if __name__ == "__main__":
    sys.exit(main())
