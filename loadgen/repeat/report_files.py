"""The report files of repeated sweeps: a repeat folder's report.html and intervals.png, and the
coverage bench's report.html, intervals.png, coverage.png and coverage.json.

``coverage_table`` is pure; the writers import matplotlib lazily (``loadgen.repeat.plots``)
and write atomically. Coverage of a set of intervals with known true values:

    share = k / n        (k of the n intervals hold the true value: low <= truth <= high)
    SE    = sqrt(share x (1 - share) / n)      (the binomial standard error of the share)

per metric and over all of them.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

from loadgen.repeat.html import (
    COVERAGE_FIGURE,
    INTERVALS_FIGURE,
    render_coverage_html,
    render_repeat_html,
)
from loadgen.run_folder.atomic import atomic_write_text

log = logging.getLogger(__name__)
REPORT_HTML = "report.html"
COVERAGE_JSON = "coverage.json"


def coverage_table(rows: list[dict]) -> list[dict]:
    """Per metric (in the rows' order) and ``all``: {"metric", "covered": k, "n", "share", "se"}."""
    if not rows:
        raise ValueError("coverage: no intervals to count (every experiment failed or none ran)")
    out = []
    for metric in [*dict.fromkeys(r["metric"] for r in rows), "all"]:
        hits = [bool(r["covered"]) for r in rows if metric == "all" or r["metric"] == metric]
        share = sum(hits) / len(hits)
        out.append({"metric": metric, "covered": sum(hits), "n": len(hits), "share": share,
                    "se": math.sqrt(share * (1 - share) / len(hits))})
    return out


def write_repeat_report(repeat_dir: Path, repeat: dict) -> dict[str, Path]:
    """``intervals.png`` and ``report.html`` of a repeat folder; a plot failure is logged and the
    page is written without it."""
    images: dict[str, bytes] = {}
    written: dict[str, Path] = {}
    try:
        from loadgen.repeat.plots import intervals_figure
        from loadgen.report.plots import save_figures

        images = save_figures({INTERVALS_FIGURE: intervals_figure(repeat)}, repeat_dir)
        written[INTERVALS_FIGURE] = Path(repeat_dir) / f"{INTERVALS_FIGURE}.png"
    except Exception:
        log.exception("repeat: drawing the intervals plot in %s failed; repeat.json is written", repeat_dir)
    written["html"] = atomic_write_text(Path(repeat_dir) / REPORT_HTML, render_repeat_html(repeat, images))
    return written


def write_coverage_report(out_dir: Path, rows: list[dict], about: dict, target: float,
                          load_unit: str = "") -> list[dict]:
    """coverage.json (the rows, ``about`` and the table), intervals.png, coverage.png and
    report.html in ``out_dir``; returns the table. ``load_unit`` names the loads (``req/s``)."""
    from loadgen.repeat.plots import coverage_figure, covered_figure
    from loadgen.report.plots import save_figures

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = coverage_table(rows)
    atomic_write_text(out / COVERAGE_JSON, json.dumps({"about": about, "target": target, "coverage": table,
                                                       "intervals": rows}, indent=2) + "\n")
    images = save_figures({COVERAGE_FIGURE: coverage_figure(table, target=target),
                           INTERVALS_FIGURE: covered_figure(rows, load_unit)}, out)
    atomic_write_text(out / REPORT_HTML, render_coverage_html(table, rows, about, images))
    return table
