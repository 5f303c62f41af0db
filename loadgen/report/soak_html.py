"""report.html's time slices section (docs/soak.md): a run that did not finish, the drift
verdict of each sliced stage, and the slices' table. Pure: summary in, HTML strings out."""

from __future__ import annotations

from loadgen.report.html_page import esc, png_img, table_html

SLICES_FIGURE = "slices"  # slices.png (loadgen.report.soak_plots)

_SHOWN = (  # (head, row key, scale, digits)
    ("stage", "stage", None, 0), ("slice", "slice", None, 0), ("start s", "start_s", 1, 0),
    ("s", "duration_s", 1, 1), ("ok", "requests", None, 0), ("errors", "error_count", None, 0),
    ("out tok/s", "output_tokens_per_s", 1, 0), ("TTFT p50 ms", "ttft_p50_s", 1000, 1),
    ("TTFT p99 ms", "ttft_p99_s", 1000, 1), ("ITL p99 ms", "itl_p99_s", 1000, 2),
    ("E2E p99 s", "e2e_p99_s", 1, 2), ("in flight", "concurrency_mean", 1, 1),
    ("KV use mean", "server_kv_usage_mean", 1, 3), ("preemptions", "server_preemptions", None, 0),
)


def unfinished_note(summary: dict) -> str | None:
    """One line when summary.json records no end of the run (killed, or still running)."""
    if (summary.get("run") or {}).get("ended_at") is not None:
        return None
    stages, slices = len(summary.get("stages") or []), len(summary.get("slices") or [])
    return (f"the run did not finish (no end recorded: killed, or still running); this report holds the "
            f"{stages} stage(s) and {slices} time slice(s) written before that")


def _cell(row: dict, key: str, scale, digits: int):
    value = row.get(key)
    if value is None or scale is None:
        return value
    text = f"{value * scale:,.{digits}f}"
    return f"~{text}" if key.endswith("p99_s") and key != "itl_p99_s" and row.get("few_samples") else text


def slices_section(summary: dict, plot_png: bytes | None = None) -> list[str]:
    """The section's parts ([] for a run without slices nor an unfinished note); ``plot_png``:
    slices.png, shown under the verdicts it draws."""
    out = []
    if (note := unfinished_note(summary)) is not None:
        out.append(f'<p class="warn">{esc(note[0].upper() + note[1:])}.</p>')
    slices = summary.get("slices") or []
    if not slices:
        return out
    out.append("<h2>Time slices</h2>")
    for stage in summary.get("stages") or []:
        if (drift := stage.get("drift")) is not None:
            out.append(f"<p>Stage {esc(stage.get('index'))}: {esc(drift.get('verdict'))}</p>")
    if plot_png is not None:
        out.append(png_img(SLICES_FIGURE, plot_png))
    rows = [[_cell(r, key, scale, digits) for _, key, scale, digits in _SHOWN] for r in slices]
    out.append(table_html([head for head, *_ in _SHOWN], rows, "slices"))
    out.append('<p class="muted">~: a p99 of fewer than 100 requests (few_samples). Slice rows: slices.csv.</p>')
    return out
