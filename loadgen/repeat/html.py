"""report.html of a repeat folder (``llm-loadgen --repeat N``) and of the coverage bench.

Pure: repeat.json (``loadgen.repeat.summary``) or coverage rows in, HTML out; the plots
arrive as PNG bytes (``loadgen.repeat.plots``), the files are written by
``loadgen.repeat.report_files``.
"""

from __future__ import annotations

from loadgen.repeat.summary import finding_lines, format_repeat_table
from loadgen.report.html_page import esc, kv_table, page, png_img, table_html

INTERVALS_FIGURE, COVERAGE_FIGURE = "intervals", "coverage"  # PNG base names (loadgen.repeat.plots)


def _images(images: dict[str, bytes]) -> str:
    return "".join(png_img(name, png) for name, png in images.items()) or '<p class="muted">Plots not drawn.</p>'


def render_repeat_html(repeat: dict, images: dict[str, bytes]) -> str:
    """The repeat folder's page: the findings with their intervals, the intervals plot, the table of
    means and intervals, each repetition (folder, seeds, exit code, findings) and the methods."""
    reps = repeat.get("repetitions") or []
    rows = [[r["index"], r.get("folder"), r.get("prompt_seed"), r.get("arrival_seed"), r.get("exit_code"),
             *((r.get("findings") or {}).get(k) for k in ("knee", "slo_max", "kv_max"))] for r in reps]
    return page(f"llm-loadgen: {len(reps)} repetitions", [
        f"<h1>llm-loadgen: {len(reps)} repetitions of one sweep</h1>",
        '<div class="key">' + "".join(f"<div>{esc(line)}</div>" for line in finding_lines(repeat)) + "</div>",
        "<h2>Intervals per stage</h2>",
        _images({k: v for k, v in images.items() if k == INTERVALS_FIGURE}),
        f"<pre>{esc(format_repeat_table(repeat))}</pre>",
        "<h2>Repetitions</h2>",
        table_html(["#", "run folder (its own report.html)", "prompt seed", "arrival seed", "exit code", "knee",
                    "SLO max", "KV max"], rows, "repetitions"),
        "<h2>Methods</h2>",
        kv_table(repeat.get("method") or {}, "method"),
    ])


def render_coverage_html(table: list[dict], rows: list[dict], about: dict, images: dict[str, bytes]) -> str:
    """The coverage bench's page: the coverage per metric and in all (with its binomial standard
    error), both plots, what was run (``about``) and every interval."""
    lines = [f"{t['metric']}: {t['covered']} of {t['n']} intervals hold the true value, {t['share']:.1%} "
             f"(+- {t['se']:.1%}, 1 binomial SE)" for t in table]
    detail = [[r["experiment"], r["metric"], r["load"], r["truth"], f"{r['low']:.4g}", f"{r['mid']:.4g}",
               f"{r['high']:.4g}", "covered" if r["covered"] else "MISSED"] for r in rows]
    return page("llm-loadgen: coverage of --repeat's 95 % intervals", [
        "<h1>Coverage of <code>llm-loadgen --repeat</code>'s 95 % intervals</h1>",
        '<div class="key">' + "".join(f"<div>{esc(line)}</div>" for line in lines) + "</div>",
        _images({k: v for k, v in images.items() if k == COVERAGE_FIGURE}),
        _images({k: v for k, v in images.items() if k == INTERVALS_FIGURE}),
        "<h2>What was run</h2>",
        kv_table(about, "about"),
        "<h2>Every interval</h2>",
        table_html(["experiment", "metric", "load", "true value", "low", "mean", "high", ""], detail, "intervals"),
    ])
