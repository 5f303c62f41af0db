"""Compare two or more runs: a side-by-side table, overlaid plots, an HTML page.

Each argument is a run folder or a results directory (its newest run, ``loadgen.run_folder.folders``).
Stages are matched by their load: the concurrency, or in rate sweeps the offered rate asked for
(``loadgen.stats.stage_load.planned_load``). A rate sweep and a concurrency sweep are refused
(``runs_load_key``): C=8 and 8 req/s are different loads, so no row of one matches a row of the
other. Runs that differ in workload, server or model are compared all
the same, under a warning line that names the difference (``differences``). ``compare_rows`` and compare.html carry every stage metric of
loadgen.stats.metrics; the text table (compare.txt, printed) the ones marked ``compare=True``, so it
fits a terminal. Ratios are ``run / first run``: for tok/s above 1.00x is better, for TTFT and ITL
below 1.00x is better.
"""

from __future__ import annotations

import os
from html import escape
from pathlib import Path

from loadgen.analysis.breakdown import column_value, compare_columns
from loadgen.analysis.knee import knee_of
from loadgen.config.run_tags import tags_text
from loadgen.errors import ConfigError
from loadgen.report.html_page import png_img
from loadgen.report.plots import load_axis, new_figure, plain_log_y, save_figures, series, throughput_title
from loadgen.run_folder.atomic import atomic_write_text
from loadgen.run_folder.folders import LATEST, resolve_run_dir, run_folders
from loadgen.run_folder.summary_file import load_summary
from loadgen.stats.metrics import COST_METRICS, STAGE_METRICS, num
from loadgen.stats.stage_load import (
    CONCURRENCY,
    RATE,
    is_rate_run,
    load_column,
    load_label,
    load_number,
    planned_load,
)

TEXT_METRICS = tuple(m for m in STAGE_METRICS if m.compare)  # the text table's groups
# with cost.gpus (or --gpu-metrics) in some run, the text table adds these (loadgen.stats.cost);
# compare.html has every figure
TEXT_COST_KEYS = ("output_tokens_per_gpu_per_s", "usd_per_million_output_tokens", "joules_per_output_token")


def text_metrics(runs: list[tuple[str, dict]]) -> tuple:
    """The text table's metrics: ``TEXT_METRICS``, then the ``TEXT_COST_KEYS`` figures some run has."""
    return TEXT_METRICS + tuple(m for m in COST_METRICS if m.key in TEXT_COST_KEYS and any(
        st.get(m.key) is not None for _, s in runs for st in s.get("stages") or []))


def run_labels(dirs: list[Path], summaries: list[dict], given: list[Path] | None = None) -> list[str]:
    """The names the runs were given by (``given``: a results directory names its newest run by
    its own name; ``latest`` by the folder it points at), else the run folders' names; if two
    collide, scenario names; if those collide too, parent/name."""
    names = [g.name if g.name not in ("", ".", "..", LATEST) else d.resolve().name
             for g, d in zip(given or dirs, dirs, strict=True)]
    if len(set(names)) == len(names):
        return names
    names = [d.resolve().name for d in dirs]
    if len(set(names)) == len(names):
        return names
    scen = [str((s.get("scenario") or {}).get("name") or "") for s in summaries]
    if all(scen) and len(set(scen)) == len(scen):
        return scen
    return [f"{d.resolve().parent.name}/{d.resolve().name}" for d in dirs]


def load_runs(dirs: list[str | os.PathLike]) -> list[tuple[str, dict]]:
    """[(label, summary)] for each run folder (or results directory: its newest run); raises
    ConfigError on a bad directory, or when two arguments are the same run (``same_run_error``)."""
    given = [Path(d) for d in dirs]
    paths = [resolve_run_dir(d) for d in given]
    summaries = [load_summary(p) for p in paths]
    if (error := same_run_error(given, paths)) is not None:
        raise error
    runs = list(zip(run_labels(paths, summaries, given), summaries, strict=True))
    runs_load_key(runs)  # refuse a rate sweep beside a concurrency sweep before writing anything
    return runs


def runs_load_key(runs: list[tuple[str, dict]]) -> str:
    """The load key the runs share: ``concurrency``, or ``offered_rate_per_s`` when all are rate
    sweeps. A mix is a ConfigError naming which run is which: a concurrency holds C requests in
    flight whatever the server does, a rate offers R arrivals/s whatever it does, so no stage of
    one matches a stage of the other, and neither do the knees (users vs req/s); matching them on
    a measured figure (achieved req/s, mean in flight) would set side by side two runs that were
    not asked the same load. The fix: run the other sweep in the same mode."""
    rate = [is_rate_run(s) for _, s in runs]
    if all(rate) or not any(rate):
        return RATE if rate[0] else CONCURRENCY
    kinds = ", ".join(f"#{i + 1} {label} is a {'rate' if r else 'concurrency'} sweep"
                      for i, ((label, _), r) in enumerate(zip(runs, rate, strict=True)))
    raise ConfigError("compare", kinds, "cannot compare a rate sweep (--rates: offered req/s) with a concurrency "
                      "sweep (--stages: requests in flight): no stage of one has the load of a stage of the other",
                      "compare runs of one kind: run the other in the same mode, e.g. --rates 1,2,4,8 or --stages 1,2,4,8")


def same_run_error(given: list[Path], paths: list[Path]) -> ConfigError | None:
    """The error for the first two arguments that resolve to one run folder (``paths[i]`` is what
    ``given[i]`` resolved to): the same folder twice, or a results directory and its own newest run
    (``results results``, ``results results/latest``) would compare a run with itself. The fix
    names the run folders to pass instead: the two newest in that run's results directory."""
    seen: dict[Path, int] = {}
    for j, path in enumerate(paths):
        i = seen.setdefault(path.resolve(), j)
        if i == j:
            continue
        run = path.resolve()
        newest = [os.path.relpath(p) for p in run_folders(run.parent)[-2:]]
        fix = ("name the two run folders to compare, e.g. compare " + " ".join(newest) if len(newest) == 2
               else f"{run.parent} holds no other run: pass two different run folders")
        return ConfigError("compare", [str(given[i]), str(given[j])],
                           f"#{i + 1} and #{j + 1} are the same run, {run} (a results directory stands for "
                           "its newest run)", fix)
    return None


# What makes two runs comparable: (what, how to read it from a summary). Stage lists may differ
# (rows are matched by load); these may not without a word.
def _workload(s: dict) -> str:
    sc = s.get("scenario") or {}
    prompt, request = sc.get("prompt") or {}, sc.get("request") or {}
    text = f"{sc.get('endpoint')} {sc.get('input_tokens')}/{sc.get('output_tokens')} tokens"
    if prompt.get("shared_prefix_tokens"):
        text += f", shared prefix {prompt['shared_prefix_tokens']}"
    if request.get("extra_body"):
        text += f", extra_body {request['extra_body']}"
    return text


COMPARABLE = (
    ("scenario", _workload),
    ("server", lambda s: f"{(s.get('run') or {}).get('host')} ({(s.get('server') or {}).get('flavor') or 'flavor unknown'})"),
    ("model", lambda s: str((s.get("run") or {}).get("model"))),
)


def differences(runs: list[tuple[str, dict]]) -> list[str]:
    """One warning line per aspect (workload, server, model) in which the runs differ, naming
    each run's value: ``warning: the runs differ in scenario: #1 completions 1000/1000 tokens,
    #2 completions 200/200 tokens``."""
    out = []
    for what, read in COMPARABLE:
        values = [read(s) for _, s in runs]
        if len(set(values)) > 1:
            each = ", ".join(f"#{i + 1} {v}" for i, v in enumerate(values))
            out.append(f"warning: the runs differ in {what}: {each}")
    return out


def _by_load(summary: dict) -> dict[float, dict]:
    """The run's stages by the load they were asked (SLO search stages included)."""
    return {planned_load(s): s for s in summary.get("stages") or [] if planned_load(s) is not None}


def ratio(value: float | None, base: float | None) -> str:
    if value is None or not base:
        return "-"
    return f"{value / base:.2f}x"


def compare_rows(runs: list[tuple[str, dict]]) -> list[dict]:
    """One dict per load seen in any run: ``{"concurrency": c, key: [value per run]}``, or for
    rate sweeps ``{"offered_rate_per_s": rate asked, ...}`` (``runs_load_key``)."""
    load = runs_load_key(runs)
    tables = [_by_load(s) for _, s in runs]
    rows = []
    for c in sorted({c for t in tables for c in t}):
        row = {load: c}
        for m in STAGE_METRICS:
            row[m.key] = [t[c].get(m.key) if c in t else None for t in tables]
        for key, _, path in compare_columns([s for _, s in runs]):  # client vs server clocks
            row[key] = [column_value(t.get(c), path) for t in tables]
        rows.append(row)
    return rows


def format_compare_table(runs: list[tuple[str, dict]]) -> str:
    """Text table: warnings on what differs between the runs, then for each metric each run's
    value and ``#k/#1`` ratios, one row per load (``C`` or ``rate`` in req/s)."""
    n, key = len(runs), runs_load_key(runs)
    rate, shown = key == RATE, text_metrics(runs)
    legend = [f"#{i + 1} = {label}{tags_text(s)}" for i, (label, s) in enumerate(runs)]
    value_heads = [f"#{i + 1}" for i in range(n)] + [f"#{i + 1}/#1" for i in range(1, n)]
    group_w = 9 * len(value_heads)
    title, unit = load_column(rate)
    line1 = f"{title if unit else '':>6}" + "".join(f" | {m.title:^{group_w}}" for m in shown)
    line2 = f"{unit or title:>6}" + "".join(" | " + "".join(f"{h:>9}" for h in value_heads) for _ in shown)
    lines = differences(runs) + legend + [line1, line2]
    for row in compare_rows(runs):
        text = f"{load_number(row[key]):>6}"
        for m in shown:
            values = row[m.key]
            cells = [m.text(v) for v in values] + [ratio(v, values[0]) for v in values[1:]]
            text += " | " + "".join(f"{cell:>9}" for cell in cells)
        lines.append(text)
    for i, (_, summary) in enumerate(runs):
        stop = (summary.get("guard") or {}).get("stopped_before")
        lines.append(f"#{i + 1} knee: {load_label(knee_of(summary), rate)}; guard stop: {load_label(stop, rate)}")
    return "\n".join(lines)


def compare_figures(runs: list[tuple[str, dict]]) -> dict:
    """``compare_throughput`` (tok/s vs the load: C, or offered rate) and ``compare_latency``
    (TTFT p50, ITL p50 vs the load): one line per run, labelled with the run label."""
    load = runs_load_key(runs)
    all_c = [s.get(load) for _, summary in runs for s in summary.get("stages") or []]
    tput = new_figure()
    lat = new_figure(ncols=2, size=(10.0, 4.2))
    for label, summary in runs:
        stages = summary.get("stages") or []
        tput.axes[0].plot(*series(stages, load, "output_tokens_per_s"), marker="o", label=label)
        for ax, key in zip(lat.axes, ("ttft_p50_s", "itl_p50_s"), strict=True):
            ax.plot(*series(stages, load, key, scale=1000.0), marker="o", label=label)
    ax = tput.axes[0]
    load_axis(ax, all_c, load)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("output tokens/s (all requests)")
    ax.set_title(throughput_title(load))
    ax.legend(fontsize=8)
    for ax, name in zip(lat.axes, ("TTFT p50 (ms)", "ITL p50 per token (ms)"), strict=True):
        load_axis(ax, all_c, load)
        plain_log_y(ax)
        ax.set_ylabel(name)
        ax.set_title(name)
        ax.legend(fontsize=8)
    return {"compare_throughput": tput, "compare_latency": lat}


def metrics_table_html(runs: list[tuple[str, dict]]) -> str:
    """Every stage metric side by side: one row per load (C, or rate in req/s), under each metric's
    title one column per run (``#1``, ``#2`` ...), values in the metric's shown unit."""
    n, key = len(runs), runs_load_key(runs)
    title, unit = load_column(key == RATE)
    head = escape(f"{title} ({unit})" if unit else title)
    clocks = compare_columns([s for _, s in runs])  # loadgen.analysis.breakdown, in ms
    titles = [m.title for m in STAGE_METRICS] + [title for _, title, _ in clocks]
    head1 = f"<th rowspan=2>{head}</th>" + "".join(f"<th colspan={n}>{escape(t)}</th>" for t in titles)
    head2 = "".join(f"<th>#{i + 1}</th>" for _ in titles for i in range(n))
    rows = []
    for row in compare_rows(runs):
        cells = "".join(
            f'<td class="n">{escape(m.text(v))}</td>' for m in STAGE_METRICS for v in row[m.key]
        ) + "".join(f'<td class="n">{escape(num(None if v is None else v * 1000))}</td>'
                    for key, _, _ in clocks for v in row[key])
        rows.append(f'<tr><td class="n">{escape(load_number(row[key]))}</td>{cells}</tr>')
    return f'<div class="wide"><table id="metrics"><tr>{head1}</tr><tr>{head2}</tr>{"".join(rows)}</table></div>'


def render_compare_html(runs: list[tuple[str, dict]], table: str, images: dict[str, bytes]) -> str:
    heads = "".join(
        f"<th>{escape(h)}</th>" for h in ("#", "run", "model", "host", "scenario", "knee", "guard stop")
    )
    rows, rate = [], runs_load_key(runs) == RATE
    for i, (label, s) in enumerate(runs):
        run = s.get("run") or {}
        cells = [
            f"#{i + 1}",
            label + tags_text(s),
            run.get("model"),
            run.get("host"),
            run.get("name") or (s.get("scenario") or {}).get("name"),
            load_label(knee_of(s), rate),
            load_label((s.get("guard") or {}).get("stopped_before"), rate),
        ]
        rows.append("<tr>" + "".join(f"<td>{escape(str(c or '-'))}</td>" for c in cells) + "</tr>")
    imgs = "".join(png_img(name, png) for name, png in images.items())
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>llm-loadgen comparison</title>'
        "<style>body{font-family:system-ui,sans-serif;margin:24px}table{border-collapse:collapse}"
        "td,th{border:1px solid #ddd;padding:3px 7px}td.n{text-align:right}.wide{overflow-x:auto;margin:12px 0}"
        "img{max-width:100%}pre{background:#f6f6f6;padding:10px}.warn{color:#b42318}"
        "</style></head><body><h1>llm-loadgen comparison</h1>"
        + "".join(f'<p class="warn">{escape(line)}</p>' for line in differences(runs))
        + f'<table id="runs"><tr>{heads}</tr>{"".join(rows)}</table>{metrics_table_html(runs)}{imgs}'
        f"<pre>{escape(table)}</pre></body></html>\n"
    )


def write_compare(out_dir: str | os.PathLike, runs: list[tuple[str, dict]]) -> dict[str, Path]:
    """compare.txt, compare_*.png and compare.html in ``out_dir``; returns {name: path}."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = format_compare_table(runs)
    written = {"text": atomic_write_text(out / "compare.txt", table + "\n")}
    images = save_figures(compare_figures(runs), out)
    written.update({name: out / f"{name}.png" for name in images})
    written["html"] = atomic_write_text(out / "compare.html", render_compare_html(runs, table, images))
    return written
