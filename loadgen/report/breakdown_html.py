"""report.html's "Where the time goes": one stacked bar per stage and metric (TTFT, E2E), CSS only.

Each bar is the client's mean split into the parts of ``loadgen.analysis.breakdown.stack`` (server
queue, prefill, decode, the server's rest, network + client), all bars of a metric on one scale
(the longest client mean fills the width). A negative part (the server's clock ahead of the
client's over the window, within the window-edge error) is drawn as nothing and printed as is.
Under the bars: each stage's diagnosis, and a flagged stage's disagreement. Pure: rows in, HTML out.
"""

from __future__ import annotations

from html import escape

from loadgen.analysis.breakdown import PART_NAMES, stack
from loadgen.stats.stage_load import stage_label

COLORS = {  # none of matplotlib's tab10 (the plots'), so a screenshot can find the bars by colour
    "queue": "#b3001b",
    "prefill": "#3a6ea5",
    "decode": "#6a3d9a",
    "server_rest": "#9e9e9e",
    "server": "#2e8b57",
    "network_client": "#f4a300",
}
LABELS = {**PART_NAMES, "server": "server (its own clock)"}
BAR_PX = 700
CSS = (f".bd td.bar{{width:{BAR_PX}px;padding:2px}}.bd .bar div{{display:flex;height:18px}}"
       ".bd .bar span{display:block;height:18px;flex:none}.sw{display:inline-block;width:12px;"
       "height:12px;margin:0 4px 0 12px;vertical-align:middle}")


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{round(seconds * 1000, 1) + 0.0:.1f}"  # + 0.0: no "-0.0"


def bar_px(seconds: float, scale_s: float) -> int:
    """A part's width: whole pixels (a fraction would blend into its neighbour's colour)."""
    return round(max(seconds, 0.0) / scale_s * BAR_PX)


def _bar(parts: list[tuple[str, float]], scale_s: float) -> str:
    spans = "".join(
        f'<span class="{p}" style="width:{bar_px(v, scale_s)}px;background:{COLORS[p]}" '
        f'title="{escape(LABELS[p])}: {_ms(v)} ms"></span>'
        for p, v in parts)
    return f'<td class="bar"><div>{spans}</div></td>'


def breakdown_section(stages: list[dict]) -> list[str]:
    """The section (heading and body), or nothing when no stage has a breakdown (a server without
    latency histograms: the report stays as it was)."""
    rows = [s for s in stages if s.get("breakdown")]
    return ["<h2>Where the time goes</h2>", breakdown_html(rows)] if rows else []


def breakdown_html(rows: list[dict]) -> str:
    """The section's body for the stages that have a breakdown."""
    out = [f"<style>{CSS}</style>",
           "<p>" + "".join(f'<span class="sw" style="background:{c}"></span>{escape(LABELS[p])}'
                           for p, c in COLORS.items()) + "</p>"]
    for metric, name in (("ttft", "TTFT"), ("e2e", "E2E"), ("itl", "ITL")):
        have = [s for s in rows if s["breakdown"].get(metric)]
        if not have:
            continue
        scale = max(max(s["breakdown"][metric]["client_mean_s"], 1e-9) for s in have)
        body = "".join(
            f"<tr><td>{escape(stage_label(s))}</td>{_bar(stack(s['breakdown'][metric]), scale)}"
            f'<td class="n">{_ms(s["breakdown"][metric]["client_mean_s"])}</td>'
            f"<td>{escape(', '.join(f'{p} {_ms(v)}' for p, v in stack(s['breakdown'][metric])))}</td></tr>"
            for s in have)
        kinds = sorted({s["breakdown"][metric].get("client_itl") for s in have} - {None})  # per_chunk on vLLM
        which = f" ({' and '.join(k.replace('_', ' ') for k in kinds)})" if kinds else ""
        out.append(f'<h3>{name}{which} mean, client = server parts + network and client (ms)</h3>'
                   f'<table class="bd" id="breakdown-{metric}"><tr><th>stage</th><th>parts</th>'
                   f"<th>client mean</th><th>parts (ms)</th></tr>{body}</table>")
    notes = [s["breakdown"]["diagnosis"] for s in rows if s["breakdown"].get("diagnosis")]
    notes += [f"{stage_label(s)}: client and server clocks disagree by {_ms(d['gap_s'])} ms "
              f"({d['compared']}); likely {d['likely_cause']}"
              for s in rows if (d := s["breakdown"].get("disagreement"))]
    out += [f"<p>{escape(n)}</p>" for n in notes]
    return "\n".join(out)
