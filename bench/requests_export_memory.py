"""Memory of the per-request export: one locust process at 1024 users with and without
``--requests-jsonl`` (the same run as ``bench/memory.py``: seeds-shaped requests against the
simulator, one stage). Prints both rows of bench/memory.py, the peak RSS ratio (the issue's
target: within 10 %), and checks the file: one line per request the summary counts.

    .venv/bin/python bench/requests_export_memory.py [--users 1024] [--duration 30] [--output-tokens N]

``--output-tokens 50`` makes short requests: many more lines (thousands a second) for the same
users, the case where a list of every request would show.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from memory import measure, print_row  # noqa: E402

from loadgen.run_folder.folders import resolve_run_dir  # noqa: E402

TARGET_RATIO = 1.10


def lines_and_counted(r: dict) -> tuple[int, int]:
    path = resolve_run_dir(r["results_dir"]) / "requests.jsonl"
    with open(path, "rb") as f:
        lines = sum(1 for _ in f)
    totals = r["totals"]
    return lines, totals["requests"] + sum(totals["errors"].values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=1024)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--output-tokens", type=int, default=None, help="default: the scenario's (1000)")
    args = ap.parse_args(argv)
    more = () if args.output_tokens is None else ("--output-tokens", str(args.output_tokens))
    with tempfile.TemporaryDirectory(prefix="bench-export-") as tmp:
        print("without --requests-jsonl")
        off = measure(args.users, args.duration, Path(tmp) / "off", *more)
        print_row(off)
        print("with --requests-jsonl")
        on = measure(args.users, args.duration, Path(tmp) / "on", *more, "--requests-jsonl")
        print_row(on)
        lines, counted = lines_and_counted(on)
    ratio = on["rss_peak_mb"] / off["rss_peak_mb"]
    window = (on["hwm_window_mb"] - on["rss_before_mb"]) - (off["hwm_window_mb"] - off["rss_before_mb"])
    print(f"peak RSS with/without the export: {on['rss_peak_mb']:.0f}/{off['rss_peak_mb']:.0f} MB = {ratio:.3f} "
          f"(target <= {TARGET_RATIO:.2f}: {'met' if ratio <= TARGET_RATIO else 'NOT met'}); growth while "
          f"streaming differs by {window:+.1f} MB")
    print(f"requests.jsonl: {lines} lines, summary counts {counted} requests (ok + failed, probes included): "
          f"{'equal' if lines == counted else 'DIFFERENT'}", flush=True)
    return 0 if ratio <= TARGET_RATIO and lines == counted else 1


if __name__ == "__main__":
    raise SystemExit(main())
