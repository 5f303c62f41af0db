"""A soak's time slices over time, with the fitted trend (docs/soak.md). Imported lazily by
``loadgen.report.plots`` (matplotlib costs a second of CPU to import; it imports nothing of ours back).

``slices_figure``: four panels (output tok/s, TTFT p99 ms, ITL p99 ms, the server's KV use) vs
minutes since the window opened, one line per sliced stage; where the stage's drift verdict moved
a series, its Sen line (slope from the verdict, intercept = median of y - slope x t over the slices
since it moved) is drawn dashed from ``since_s`` on. The title says what each stage's verdict moved.
"""

from __future__ import annotations

import statistics

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

PANELS = (  # (row key, drift series, axis label, scale)
    ("output_tokens_per_s", "throughput", "output tok/s", 1.0),
    ("ttft_p99_s", "ttft_p99", "TTFT p99 (ms)", 1000.0),
    ("itl_p99_s", "itl_p99", "ITL p99 (ms)", 1000.0),
    ("server_kv_usage_mean", "kv_usage", "server KV use", 1.0),
)


def _mid_min(row: dict) -> float:
    return (row["start_s"] + row["duration_s"] / 2) / 60.0


def trend_line(rows: list[dict], key: str, moved: dict, scale: float) -> tuple[list[float], list[float]]:
    """(minutes, values) of the Sen line of a moved series over the slices since it moved."""
    since_min, slope_per_min = moved["since_s"] / 60.0, moved["slope_per_h"] / 60.0
    points = [(_mid_min(r), r[key]) for r in rows if r.get(key) is not None and _mid_min(r) >= since_min]
    if len(points) < 2:
        return [], []
    intercept = statistics.median(y - slope_per_min * t for t, y in points)
    ts = [points[0][0], points[-1][0]]
    return ts, [(intercept + slope_per_min * t) * scale for t in ts]


def slices_figure(summary: dict) -> Figure:
    slices = summary.get("slices") or []
    stages = {s.get("index"): s for s in summary.get("stages") or []}
    fig = Figure(figsize=(10.0, 6.0), dpi=100, layout="constrained")  # as plots.new_figure, 2 x 2
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 2).ravel()
    for ax, (key, series, label, scale) in zip(axes, PANELS, strict=True):
        for k in sorted({r["stage"] for r in slices}):
            rows = [r for r in slices if r["stage"] == k and r.get(key) is not None]
            ax.plot([_mid_min(r) for r in rows], [r[key] * scale for r in rows], marker=".", linewidth=0.8,
                    label=f"stage {k}")
            moved = {m["series"]: m for m in ((stages.get(k) or {}).get("drift") or {}).get("moved", [])}
            if series in moved:
                ts, ys = trend_line(rows, key, moved[series], scale)
                ax.plot(ts, ys, linestyle="--", color="red", label=f"stage {k} trend")
        ax.set_xlabel("minutes since the window opened")
        ax.set_ylabel(label)
        if ax.lines:
            ax.legend(fontsize="small")
    fig.suptitle(title(summary), fontsize="medium")
    return fig


def title(summary: dict, limit: int = 110) -> str:
    """What each sliced stage's verdict says, short: ``stage 0: drift in throughput, kv_usage; stage 1:
    steady`` (the verdict lines, with slopes, intervals and since when, are printed beside the plot)."""
    parts = []
    for k in sorted({r["stage"] for r in summary.get("slices") or []}):
        drift = next((s.get("drift") for s in summary.get("stages") or [] if s.get("index") == k), None) or {}
        if drift.get("drift"):
            parts.append(f"stage {k}: drift in {', '.join(m['series'] for m in drift['moved'])}")
        else:
            parts.append(f"stage {k}: " + ("steady" if drift.get("drift") is False else "no drift verdict yet"))
    text = "; ".join(parts) or "no drift verdict yet"
    return text if len(text) <= limit else text[:limit - 3].rsplit(" ", 1)[0].rstrip(",;") + " ..."
