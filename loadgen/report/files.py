"""A run folder's files: summary.json, stages.csv, PNG plots and report.html.

Every file is written atomically (loadgen.run_folder.atomic), so a crash or Ctrl-C mid-write leaves
the previous complete file, never half of one. ``write_results`` may be called after every stage;
the last call wins. ``loadgen.report.plots`` is imported only when plots are drawn: importing
matplotlib costs about a second of CPU, which a load generator must not pay between stages.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from loadgen.report.html import render_report_html
from loadgen.report.models import MODELS_CSV, has_models, write_models_csv
from loadgen.report.predicted_html import FIT_FIGURE
from loadgen.report.replicas import REPLICAS_CSV, has_replicas, write_replicas_csv
from loadgen.report.table import write_stages_csv
from loadgen.run_folder.atomic import atomic_write_text
from loadgen.run_folder.summary_file import SUMMARY, summary_json_text

log = logging.getLogger(__name__)

STAGES_CSV = "stages.csv"
REPORT_HTML = "report.html"


def write_results(results_dir: str | os.PathLike, summary: dict, *, plots: bool = True,
                  final: bool = True) -> dict[str, Path]:
    """Write the whole run folder for ``summary``; returns {name: path} of files written.

    Order matters: summary.json and stages.csv first, so a failure in matplotlib or the HTML can
    never lose them; plot and HTML errors are logged, not raised. ``plots=False`` skips the
    matplotlib work (most of a second of CPU, which would stall a gevent loop measuring a stage)
    and writes report.html without images, saying the plots come at the end of the run
    (``final=False``: a final call with ``plots=True`` completes the report) or were not drawn
    (``final=True``: the run's ``--no-plots``; ``report build`` draws them).
    """
    out = Path(results_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = {"summary": atomic_write_text(out / SUMMARY, summary_json_text(summary))}
    written.update(write_derived(out, summary, plots=plots, final=final))
    return written


def write_derived(results_dir: Path, summary: dict, *, plots: bool = True, final: bool = True) -> dict[str, Path]:
    """stages.csv, the PNG plots and report.html from ``summary`` (summary.json is not touched).

    Keys of the result: ``stages_csv``, one per plot (``throughput``, ``latency``, ``tradeoff``,
    and ``calibration_fit`` for a what-if with a calibrated preset: ``loadgen.report.fit_plot``) and
    ``html``; a plot or HTML failure is logged and its key is missing.
    """
    out = Path(results_dir)
    written = {"stages_csv": write_stages_csv(out / STAGES_CSV, summary.get("stages") or [])}
    if has_models(summary.get("stages") or []):  # a mix of models: one row per stage and model
        written["models_csv"] = write_models_csv(out / MODELS_CSV, summary["stages"])
    if has_replicas(summary.get("stages") or []):  # several replicas: one row per stage and replica
        written["replicas_csv"] = write_replicas_csv(out / REPLICAS_CSV, summary["stages"])
    images: dict[str, bytes] = {}
    if plots:
        try:
            from loadgen.report.plots import build_run_figures, save_figures  # matplotlib: see above

            figures = build_run_figures(summary)
            if summary.get("calibration"):  # a what-if's: the fit of the preset it was predicted from
                from loadgen.report.fit_plot import fit_figure

                figures[FIT_FIGURE] = fit_figure(summary["calibration"])
            images = save_figures(figures, out)
            written.update({name: out / f"{name}.png" for name in images})
        except Exception:
            log.exception(
                "report: drawing the plots in %s failed; summary.json and stages.csv are written", out
            )
    try:
        html = render_report_html(summary, images, plots_wanted="yes" if plots else "no" if final else "later")
        written["html"] = atomic_write_text(out / REPORT_HTML, html)
    except Exception:
        log.exception("report: writing %s failed; summary.json and stages.csv are written", out / REPORT_HTML)
    return written
