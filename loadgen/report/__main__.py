"""Command line: rebuild a run's report, or compare runs.

    python -m loadgen.report build RUN_DIR
    python -m loadgen.report compare RUN_DIR1 RUN_DIR2 [...] [--out DIR]
    python -m loadgen.report compare BASELINE CANDIDATE [--fail-on RULES] [--out DIR]   (repeat folders)

A RUN_DIR is a run's folder or a results directory (then its newest run, loadgen.run_folder.folders).

Exit codes: 0 done; 1 plots or HTML could not be written (see the log); 2 bad input (a missing
directory or an invalid summary.json), with one line naming the path and the fix; 6 the gate found a
regression beyond a --fail-on threshold (two repeat folders: loadgen.repeat.gate_command).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from loadgen.analysis.knee import knee_of
from loadgen.errors import EXIT_CONFIG, EXIT_FAILURES, EXIT_OK, ConfigError
from loadgen.repeat.gate_command import is_repeat_dir, run_gate
from loadgen.report.compare import format_compare_table, load_runs, write_compare
from loadgen.report.files import write_derived
from loadgen.report.soak_html import unfinished_note
from loadgen.report.table import format_stage_table
from loadgen.run_folder.folders import resolve_run_dir
from loadgen.run_folder.slices_csv import with_csv_slices
from loadgen.run_folder.summary_file import load_summary
from loadgen.stats.stage_load import is_rate_run


def emit(text: str) -> None:
    """Print to stdout; a reader that has gone (`compare A B | head -3`) is not an error: the rest
    is dropped (stdout then points at /dev/null, so the final flush does not raise either) and
    the files are still written."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m loadgen.report", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="rebuild stages.csv, the plots and report.html from summary.json")
    build.add_argument("results_dir", type=Path, metavar="RUN_DIR", help="a run folder, or a results directory (its newest run)")
    compare = sub.add_parser("compare", help="compare two or more runs (run folders or results directories)")
    compare.add_argument("dirs", nargs="+", type=Path, metavar="DIR")
    compare.add_argument(
        "--out",
        type=Path,
        default=Path("compare"),
        help="directory for compare.txt, compare_*.png, compare.html (default: ./compare)",
    )
    compare.add_argument("--fail-on", default=None, metavar="RULES",
                         help="two repeat folders (llm-loadgen --repeat N): exit 6 when a metric is worse at 95 %% "
                              "and beyond its threshold, e.g. output_tokens_per_s:-5%%,ttft_p99_s:+10%%")
    return parser


def build(results_dir: Path) -> int:
    results_dir = resolve_run_dir(results_dir)
    summary = with_csv_slices(results_dir, load_summary(results_dir))
    if (note := unfinished_note(summary)) is not None:
        print(f"report: {note}", file=sys.stderr)
    threshold = (summary.get("knee") or {}).get("threshold", 0.1)
    emit(format_stage_table(summary["stages"], knee_of(summary), summary.get("guard"), threshold,
                            slo=summary.get("slo"), open_loop=is_rate_run(summary)))
    written = write_derived(results_dir, summary)
    if summary.get("slices"):
        emit(f"time slices: {len(summary['slices'])} (slices.csv)")
    missing = [name for name in ("throughput", "latency", "tradeoff", "html") if name not in written]
    for path in written.values():
        emit(f"wrote {path}")
    if missing:
        print(
            f"report: could not write {', '.join(missing)} in {results_dir} (see the error above)",
            file=sys.stderr,
        )
        return EXIT_FAILURES
    return EXIT_OK


def compare(dirs: list[Path], out: Path, fail_on: str | None = None) -> int:
    if fail_on is not None or (len(dirs) == 2 and all(map(is_repeat_dir, dirs))):
        return run_gate(dirs, out, fail_on, emit)
    if len(dirs) < 2:
        raise ConfigError(
            "compare",
            [str(d) for d in dirs],
            "needs at least two run folders (or results directories)",
            "pass DIR1 DIR2 [...]",
        )
    runs = load_runs(dirs)
    emit(format_compare_table(runs))
    for path in write_compare(out, runs).values():
        emit(f"wrote {path}")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = _parser().parse_args(argv)
    try:
        if args.command == "build":
            return build(args.results_dir)
        return compare(args.dirs, args.out, args.fail_on)
    except ConfigError as exc:
        print(f"report: {exc}", file=sys.stderr)
        return EXIT_CONFIG


if __name__ == "__main__":
    sys.exit(main())
