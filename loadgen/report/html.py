"""report.html: one self-contained file (inline CSS, plots as base64 PNG data URIs, no JavaScript,
no external resources), so it can be mailed or archived alone. Every string from the summary is
escaped with html.escape.
"""

from __future__ import annotations

import json
from html import escape

from loadgen.analysis.knee import knee_of, rate_knee_text
from loadgen.report.breakdown_html import breakdown_section
from loadgen.report.gpu_html import gpu_section, lowest_energy_line
from loadgen.report.html_page import esc as _e
from loadgen.report.html_page import kv_table, page, png_img
from loadgen.report.models import models_html
from loadgen.report.predicted_html import FIT_FIGURE, calibration_section, predicted_banner
from loadgen.report.replicas import replicas_html
from loadgen.report.slo_line import slo_line
from loadgen.report.soak_html import SLICES_FIGURE, slices_section
from loadgen.report.table import (
    columns,
    errors_compact,
    flags_shown,
    kv_ceiling_line,
    mismatch_compact,
    num,
    stage_flags,
)
from loadgen.stats.flags import FLAGS
from loadgen.stats.stage_load import (
    RATE,
    is_rate_run,
    load_column,
    load_key,
    load_label,
    load_number,
    stage_label,
    stage_load,
)

SECTIONS_META = ("name", "label", "metadata", "host", "model", "endpoint", "started_at", "ended_at", "stop_reason", "exit_code", "workers")


def guard_lines(guard: dict, rate: bool = False) -> list[str]:
    """Plain-text lines describing the KV guard (escaped by the caller); its loads are offered
    rates in an open-loop run (``rate``)."""
    cap = guard.get("capacity_tokens")
    if not cap:
        lines = ["unguarded: no capacity known"]
    else:
        lines = [
            f"KV capacity {cap:,} tokens (source: {guard.get('capacity_source') or 'unknown'}),"
            f" margin {guard.get('margin', '-')}, action {guard.get('action', '-')}"
        ]
    if guard.get("stopped_before") is not None:
        lines.append(f"stopped before {load_label(guard['stopped_before'], rate)}: its projected KV use exceeds "
                     "the capacity")
    if guard.get("clamped_to") is not None:
        lines.append(f"last stage clamped to {load_label(guard['clamped_to'], rate)}")
    return lines


def key_findings(summary: dict, knee: float | None) -> str:
    """The answer first: where it saturates, where it breaks, where the guard stopped (a rate
    sweep's knee with its evidence, ``rate_knee_text``)."""
    stages = summary.get("stages") or []
    rated = [s for s in stages if s.get("output_tokens_per_s") is not None]
    rate = is_rate_run(summary)
    lines = []
    if rate:
        text = rate_knee_text(stages, (summary.get("knee") or {}).get("threshold", 0.1))
        lines += [] if text is None else [_e(f"Saturation knee: {text}")]
    elif knee is not None:
        tput = next((s["output_tokens_per_s"] for s in rated if s.get("concurrency") == knee), None)
        lines.append(
            f"Saturation knee: C={knee} ({num(tput)} output tok/s); more concurrency adds"
            f" &lt;{(summary.get('knee') or {}).get('threshold', 0.1):.0%} per doubling"
        )
    elif rated:
        lines.append("Saturation knee: none found, throughput still rising at the last stage")
    if summary.get("slo"):
        lines.append(_e(slo_line(summary["slo"])))
    ceiling = (summary.get("guard") or {}).get("max_concurrency")
    if ceiling is not None:
        lines.append(_e(kv_ceiling_line(ceiling, rate)))
    if rated:
        peak = max(rated, key=lambda s: s["output_tokens_per_s"])
        lines.append(f"Peak throughput: {num(peak['output_tokens_per_s'])} output tok/s at {_e(stage_label(peak))}")
    priced = [s for s in stages if s.get("usd_per_million_output_tokens") is not None]
    if priced:  # loadgen.stats.cost
        best = min(priced, key=lambda s: s["usd_per_million_output_tokens"])
        lines.append(_e(f"Cost: ${num(best['usd_per_million_output_tokens'])} per million output tokens at "
                        f"{stage_label(best)} ({num(best.get('output_tokens_per_gpu_per_s'))} output tok/s per GPU)"))
    if (energy := lowest_energy_line(stages)) is not None:  # --gpu-metrics
        lines.append(_e(energy))
    failing = [s for s in stages if s.get("error_count")]
    if failing:
        first = failing[0]
        kinds = errors_compact(first).partition(" ")[2]
        lines.append(
            f'<span class="warn">Errors from {_e(stage_label(first))}:'
            f" {_e(first.get('error_count'))} failed ({_e(kinds)}), {_e(first.get('requests'))} ok</span>"
        )
    else:
        lines.append("Errors: none")
    lines += [_e(f"Guard: {line}") for line in guard_lines(summary.get("guard") or {}, rate)]
    lines += [f'<span class="warn">{_e(f"Note: {note}")}</span>' for note in summary.get("notes") or []]
    return '<div class="key">' + "".join(f"<div>{line}</div>" for line in lines) + "</div>"


def stage_table_html(stages: list[dict], knee: float | None, rate: bool = False) -> str:
    cols = columns(any("slo" in s for s in stages))
    cols[0] = (*load_column(rate), *cols[0][2:])
    heads = [
        escape(name) + (f"<br><span class=muted>{escape(unit)}</span>" if unit else "")
        for name, unit, _, _ in cols
    ]
    head = "".join(f"<th>{h}</th>" for h in heads + ["errors", "token mismatch", "flags"])
    rows = []
    for s in stages:
        cells = "".join(f'<td class="n">{_e(cell(s))}</td>' for _, _, _, cell in cols)
        cells += f"<td>{_e(errors_compact(s))}</td><td>{_e(mismatch_compact(s))}</td>"
        cells += f"<td>{_e(', '.join(flags_shown(s, knee)))}</td>"
        cls = ' class="knee"' if knee is not None and stage_load(s) == knee else ""
        rows.append(f"<tr{cls}>{cells}</tr>")
    return f'<table id="stages"><tr>{head}</tr>{"".join(rows)}</table>'


def flags_legend_html(seen: set[str]) -> str:
    """Every flag with its one-line meaning (``loadgen.stats.flags``); the ones this run shows first,
    marked."""
    rows = sorted(FLAGS, key=lambda f: f.key not in seen)
    body = "".join(
        f'<tr{" class=seen" if f.key in seen else ""}><th>{_e(f.key)}</th>'
        f"<td>{'this run' if f.key in seen else ''}</td><td>{_e(f.meaning)}</td></tr>"
        for f in rows
    )
    return f'<table id="flags" class="kv">{body}</table>'


def errors_table_html(stages: list[dict]) -> str:
    kinds = sorted({k for s in stages for k, n in (s.get("errors") or {}).items() if n})
    if not kinds:
        return "<p>No failed requests.</p>"
    title, unit = load_column(load_key(stages) == RATE)
    head = f"<th>{_e(f'{title} ({unit})' if unit else title)}</th>" + "".join(f"<th>{_e(k)}</th>" for k in kinds)
    rows = "".join(
        "<tr><td class=n>"
        + _e(load_number(stage_load(s)))
        + "</td>"
        + "".join(f'<td class="n">{_e((s.get("errors") or {}).get(k, 0))}</td>' for k in kinds)
        + "</tr>"
        for s in stages
    )
    return f'<table id="errors"><tr>{head}</tr>{rows}</table>'


def failures_html(totals: dict) -> str:
    """The server's reasons (summary.json ``totals.failures``): kind, HTTP status, message, count."""
    failures = {k: v for k, v in (totals.get("failures") or {}).items() if k != "other_messages"}
    if not failures:
        return ""
    rows = "".join(
        f'<tr><td>{_e(kind)}</td><td class="n">{_e(e["status"] if e["status"] is not None else "-")}</td>'
        f'<td>{_e(e["message"])}</td><td class="n">{_e(e["requests"])}</td></tr>'
        for kind, entries in sorted(failures.items()) for e in entries
    )
    other = (totals.get("failures") or {}).get("other_messages") or {}
    more = (f'<p class="muted">Other messages (not kept): {_e(", ".join(f"{k} {n}" for k, n in other.items()))}</p>'
            if other else "")
    return ("<h3>What the server said</h3><table id=\"failures\"><tr><th>kind</th><th>HTTP</th><th>message</th>"
            f"<th>requests</th></tr>{rows}</table>{more}")


PLOTS_WHY = {  # why a report has no plots, by what was asked: drawn now, later, or not at all
    "yes": "not available (see the run log)",
    "later": "drawn at the end of the run",
    "no": "not drawn (--no-plots): <code>llm-loadgen report build RUN_FOLDER</code> draws them",
}


def images_html(images: dict[str, bytes], plots_wanted: str) -> str:
    if not images:
        return f'<p class="muted">Plots {PLOTS_WHY[plots_wanted]}.</p>'
    return "".join(png_img(name, png) for name, png in images.items())


def render_report_html(
    summary: dict, images: dict[str, bytes] | None = None, plots_wanted: str = "yes"
) -> str:
    """The full HTML document for one run; ``images`` maps plot name to PNG bytes; without any,
    ``plots_wanted`` (a key of ``PLOTS_WHY``) says why."""
    run = summary.get("run") or {}
    stages = summary.get("stages") or []
    knee = knee_of(summary)
    title = f"llm-loadgen: {run.get('model') or 'unknown model'} @ {run.get('host') or '?'}"
    if run.get("name"):
        title += f" ({run['name']})"
    meta = {k: run.get(k) for k in SECTIONS_META}
    meta["metadata"] = ", ".join(f"{k}={v}" for k, v in (run.get("metadata") or {}).items()) or None
    if run.get("worker_losses"):
        meta["worker_losses"] = run["worker_losses"]
    all_flags = sorted({f for s in stages for f in stage_flags(s, knee)})
    images = dict(images or {})
    fit_png = images.pop(FIT_FIGURE, None)
    slices_png = images.pop(SLICES_FIGURE, None)  # in its own section, under the verdicts
    predicted = bool(summary.get("predicted"))
    if predicted:
        title = f"PREDICTED {title}"
    body = [
        f"<h1>{_e(title)}</h1>",
        predicted_banner(summary) if predicted else "",
        key_findings(summary, knee),
        "<h2>Plots (predicted)</h2>" if predicted else "<h2>Plots</h2>",
        images_html(images, plots_wanted),
        *(calibration_section(summary["calibration"], fit_png) if summary.get("calibration") else []),
        "<h2>Stages (predicted: every row)</h2>" if predicted else "<h2>Stages</h2>",
        stage_table_html(stages, knee, is_rate_run(summary)),
        *models_html(stages),
        *replicas_html(stages),
        f"<p>Flags seen: {_e(', '.join(all_flags) or 'none')}</p>",
        *breakdown_section(stages),
        *slices_section(summary, slices_png),
        *gpu_section(stages),
        "<h2>Flags</h2>",
        flags_legend_html(set(all_flags)),
        "<h2>Errors by kind</h2>",
        errors_table_html(stages),
        failures_html(summary.get("totals") or {}),
        "<h2>Run</h2>",
        kv_table(meta),
        "<h2>KV guard</h2>",
        "".join(f"<p>{_e(line)}</p>" for line in guard_lines(summary.get("guard") or {}, is_rate_run(summary))),
        "<h2>Server</h2>",
        kv_table(summary.get("server") or {}),
        "<h2>Scenario</h2>",
        f"<pre>{_e(json.dumps(summary.get('scenario') or {}, indent=2, default=str))}</pre>",
        f'<p class="muted">{_e(json.dumps(summary.get("tool") or {}, default=str))}</p>',
    ]
    return page(title, body)
