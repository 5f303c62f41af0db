"""Plots of a sweep, as matplotlib Figures (Agg canvas, no pyplot global state).

Import this module lazily (loadgen.report.files does): matplotlib costs a second of CPU to
import, which a load generator should not pay at start. Builders return Figures so tests can
read the plotted series (``line.get_label()``, ``get_xdata()``, ``get_ydata()``); ``figure_png``
renders one to bytes.

Figures of one run (names are also the PNG file names):
- ``throughput``: aggregate output tok/s vs concurrency (log2 x), knee and guard stop marked; with
  SLO objectives also goodput tok/s, the SLO maximum, the SLO search stages and the KV ceiling;
- ``latency``: TTFT p50/p99 (left axes) and per-token ITL p50/p99 (right axes) vs concurrency, ms;
- ``tradeoff``: per-request decode tok/s (p50) vs aggregate output tok/s, points labelled C=...
- ``pareto`` (with ``cost.gpus``): output tok/s per GPU vs tok/s per user (decode tok/s p50), the
  Pareto front (``loadgen.stats.cost.pareto_front``) joined and marked;
- ``spec_cache`` (when the server reported them): its accept length beside the client's tokens
  per chunk, its prefix cache hit rate beside the client's cached share, vs concurrency;
- ``slices`` (a soak's time slices): ``loadgen.report.soak_plots``.
A rate sweep's x axis is the offered rate, and its loads are labelled ``8 req/s``
(``loadgen.stats.stage_load``).
"""

from __future__ import annotations

import io
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, LogFormatter, NullLocator

from loadgen.analysis.knee import knee_of
from loadgen.report.soak_plots import slices_figure
from loadgen.run_folder.atomic import atomic_write_bytes
from loadgen.stats.cost import pareto_front
from loadgen.stats.stage_load import CONCURRENCY, RATE, load_key, load_label, stage_label, stage_load

SIZE_IN = (8.0, 4.5)
DPI = 100


def new_figure(ncols: int = 1, size: tuple[float, float] = SIZE_IN) -> Figure:
    fig = Figure(figsize=size, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    fig.subplots(1, ncols)
    return fig


def figure_png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def series(stages: list[dict], x_key: str, y_key: str, scale: float = 1.0) -> tuple[list, list]:
    """(x, y) of the stages that have both values, sorted by x; y multiplied by ``scale``."""
    points = sorted(
        (s[x_key], s[y_key] * scale) for s in stages if s.get(x_key) is not None and s.get(y_key) is not None
    )
    return [p[0] for p in points], [p[1] for p in points]


def concurrency_axis(ax, concurrencies: list, label: str = "concurrency (requests in flight)") -> None:
    """Log2 x axis ticked at exactly the loads that were run (1, 4, 16, 32, ... or rates; see
    ``load_axis``)."""
    ax.set_xscale("log", base=2)
    ticks = sorted({c for c in concurrencies if c and c > 0})
    if ticks:
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.set_xticklabels([f"{c:g}" if float(c).is_integer() else f"{c:.4g}" for c in ticks])  # 62.61, not 62.6102
        ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(label)
    ax.grid(True, alpha=0.3)


RATE_AXIS = "offered rate (requests/s)"


def load_axis(ax, loads: list, key: str) -> None:
    """``concurrency_axis`` labelled for the sweep's load ``key``: concurrency or offered rate."""
    if key == RATE:
        concurrency_axis(ax, loads, RATE_AXIS)
    else:
        concurrency_axis(ax, loads)


class PlainLogFormatter(LogFormatter):
    """matplotlib's log tick labelling (which minor ticks get a label), written as 20, 0.5, 1e+05."""

    def _num_to_string(self, x, vmin, vmax):
        return f"{x:g}"


def plain_log_y(ax) -> None:
    """Log y axis labelled 10, 100, 1000 rather than 10^1, 10^2: people read milliseconds."""
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(PlainLogFormatter())
    ax.yaxis.set_minor_formatter(PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.4)))


def _no_data(ax, text: str = "no measured stages") -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="gray")


def _capacity_text(guard: dict) -> str:
    cap = guard.get("capacity_tokens")
    if not cap:
        return "capacity unknown"
    return f"KV capacity {cap / 1e6:.2f}M tokens" if cap >= 1e6 else f"KV capacity {cap:,} tokens"


def _slo_marks(ax, stages: list[dict], xs: list, ys: list, slo: dict | None, guard: dict,
               key: str = CONCURRENCY) -> None:
    """Goodput tok/s (``goodput tok/s``), the search stages (``SLO search stages``), the SLO maximum
    (``SLO max C=..``, a vertical line) and the KV ceiling (``KV ceiling C=..``, drawn when it is
    within 4x the largest stage, else named in a note; a concurrency, so not on a rate axis)."""
    gx, gy = series(stages, key, "goodput_output_tokens_per_s")
    if gx:
        ax.plot(gx, gy, marker=".", color="tab:green", label="goodput tok/s (met the SLO)")
    search = [s.get(key) for s in stages if s.get("search")]
    if search:
        pts = [(x, y) for x, y in zip(xs, ys, strict=True) if x in search]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=9, linestyle="none",
                markerfacecolor="none", color="tab:purple", label="SLO search stages")
    best = (slo or {}).get("max_concurrency")
    if best is not None:
        ax.axvline(best, color="tab:green", linestyle="-.", label=f"SLO max {load_label(best, key == RATE)}")
    ceiling = guard.get("max_concurrency") if key == CONCURRENCY else None
    if ceiling is not None and xs and ceiling <= 4 * max(xs):
        ax.axvline(ceiling, color="tab:red", linestyle=":", label=f"KV ceiling C={ceiling}")
    elif ceiling is not None and xs:
        ax.text(0.99, 0.02, f"KV ceiling C={ceiling:,} (off the chart)", transform=ax.transAxes,
                ha="right", va="bottom", color="tab:red", fontsize=8)


def throughput_title(key: str) -> str:
    return "Throughput vs offered rate" if key == RATE else "Throughput vs concurrency"


def throughput_figure(
    stages: list[dict], knee: int | None = None, guard: dict | None = None, title: str = "",
    slo: dict | None = None,
) -> Figure:
    """Aggregate output tok/s vs concurrency. Lines: ``output tok/s``; ``knee C=..`` (one point);
    ``guard stop C=..`` (a vertical line at ``guard.stopped_before``); and ``_slo_marks``' (goodput,
    SLO maximum from summary.json ``slo``, search stages, KV ceiling ``guard.max_concurrency``).
    A rate sweep: vs offered rate, labels in req/s, and ``_achieved_marks`` on a right axis."""
    fig = new_figure()
    ax = fig.axes[0]
    key = load_key(stages)
    xs, ys = series(stages, key, "output_tokens_per_s")
    # ticks at the sweep's stages and the SLO maximum (search stages crowd around it)
    ticks = [s.get(key) for s in stages if not s.get("search")] + [(slo or {}).get("max_concurrency")]
    if xs:
        ax.plot(xs, ys, marker="o", color="tab:blue", label="output tok/s")
    else:
        _no_data(ax)
    _slo_marks(ax, stages, xs, ys, slo, guard or {}, key)
    if knee is not None and knee in xs:
        ax.plot(
            [knee],
            [ys[xs.index(knee)]],
            marker="*",
            markersize=16,
            linestyle="none",
            color="tab:orange",
            label=f"knee {load_label(knee, key == RATE)}",
        )
    stop = (guard or {}).get("stopped_before")
    if stop:
        ticks.append(stop)
        ax.axvline(stop, color="tab:red", linestyle="--", label=f"guard stop {load_label(stop, key == RATE)}")
        ax.annotate(
            f"not run: {load_label(stop, key == RATE)}\nexceeds {_capacity_text(guard)}",
            xy=(stop, 0.5),
            xycoords=("data", "axes fraction"),
            ha="right",
            va="center",
            color="tab:red",
            fontsize=8,
            xytext=(-4, 0),
            textcoords="offset points",
        )
    load_axis(ax, ticks, key)
    ax.set_ylabel("output tokens/s (all requests)")
    ax.set_ylim(bottom=0)
    ax.set_title(title or throughput_title(key))
    if xs:
        ax.legend(loc="upper left", fontsize=8)
    if key == RATE:
        _achieved_marks(ax, stages)
    return fig


def _achieved_marks(ax, stages: list[dict]) -> None:
    """A rate sweep's right axis: ``achieved req/s`` beside ``offered req/s`` (dotted, y = x), so
    the knee shows where achieved stops following offered (``loadgen.analysis.knee``)."""
    xs, ys = series(stages, RATE, "achieved_rate_per_s")
    if not xs:
        return
    right = ax.twinx()
    right.plot(xs, xs, linestyle=":", color="gray", label="offered req/s")
    right.plot(xs, ys, marker="s", color="tab:purple", label="achieved req/s")
    right.set_ylabel("requests/s")
    right.set_ylim(bottom=0)
    right.legend(loc="lower right", fontsize=8)


def latency_figure(stages: list[dict], title: str = "") -> Figure:
    """Left axes: TTFT p50/p99 in ms; right axes: per-token ITL p50/p99 in ms; both vs concurrency
    (log y). Line labels: ``TTFT p50``, ``TTFT p99``, ``ITL p50``, ``ITL p99``."""
    fig = new_figure(ncols=2, size=(10.0, 4.2))
    key = load_key(stages)
    concurrencies = [s.get(key) for s in stages]
    for ax, metric, name in ((fig.axes[0], "ttft", "TTFT"), (fig.axes[1], "itl", "ITL")):
        plotted = False
        for q, style in (("p50", "-"), ("p99", "--")):
            xs, ys = series(stages, key, f"{metric}_{q}_s", scale=1000.0)
            if xs:
                ax.plot(xs, ys, marker="o", linestyle=style, label=f"{name} {q}")
                plotted = True
        load_axis(ax, concurrencies, key)
        ax.set_ylabel(f"{name} (ms)")
        ax.set_title(f"{name} {'(per token)' if metric == 'itl' else ''}".strip())
        if plotted:
            plain_log_y(ax)
            ax.legend(fontsize=8)
        else:
            _no_data(ax)
    if title:
        fig.suptitle(title)
    return fig


LABEL_PT = 8  # font size of the C=... / ... req/s labels
# Where a label may go, relative to its point (points): right-above first, then around it.
LABEL_OFFSETS_PT = ((4, 4), (4, -12), (-4, 4), (-4, -12), (4, 14), (-4, 14), (4, -22), (-4, -22))


def label_offsets(points_pt: list[tuple[float, float]], texts: list[str]) -> list[tuple[float, float]]:
    """An offset (points) for each label so that no two label boxes overlap where avoidable.

    ``points_pt``: the points in display points. A label box is ~0.6 x LABEL_PT wide per character
    and LABEL_PT high; a negative x offset puts the box's right edge there (the annotation is then
    right-aligned). The first candidate in LABEL_OFFSETS_PT that meets no box already placed wins;
    if every candidate collides, the first is used.
    """
    placed: list[tuple[float, float, float, float]] = []
    out = []
    for (x, y), text in zip(points_pt, texts, strict=True):
        w, h = 0.6 * LABEL_PT * len(text), float(LABEL_PT)
        choice = LABEL_OFFSETS_PT[0]
        for dx, dy in LABEL_OFFSETS_PT:
            x0 = x + dx if dx >= 0 else x + dx - w
            box = (x0, y + dy, x0 + w, y + dy + h)
            if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in placed):
                choice = (dx, dy)
                break
        dx, dy = choice
        x0 = x + dx if dx >= 0 else x + dx - w
        placed.append((x0, y + dy, x0 + w, y + dy + h))
        out.append(choice)
    return out


def tradeoff_figure(stages: list[dict], knee: float | None = None, title: str = "") -> Figure:
    """Per-request decode tok/s (p50) vs aggregate output tok/s: the serving trade-off curve.
    One line ``stages``; each point annotated with its load, ``C=<concurrency>`` or ``<rate> req/s``
    (``ax.texts``)."""
    fig = new_figure()
    ax = fig.axes[0]
    points = sorted(
        (stage_load(s), s["output_tokens_per_s"], s["decode_tps_p50"], stage_label(s))
        for s in stages
        if stage_load(s) is not None
        and s.get("output_tokens_per_s") is not None
        and s.get("decode_tps_p50") is not None
    )
    if points:
        ax.plot([p[1] for p in points], [p[2] for p in points], marker="o", color="tab:green", label="stages")
        # headroom so points and their labels never sit on the frame (flat curves included)
        ax.set_xlim(0, max(p[1] for p in points) * 1.15 or 1.0)
        ax.set_ylim(0, max(p[2] for p in points) * 1.15 or 1.0)
        to_pt = 72.0 / DPI  # display pixels -> points
        where = [tuple(v * to_pt for v in ax.transData.transform((x, y))) for _, x, y, _ in points]
        texts = [text for *_, text in points]
        for (c, x, y, _), text, (dx, dy) in zip(points, texts, label_offsets(where, texts), strict=True):
            ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=LABEL_PT,
                        fontweight="bold" if c == knee else "normal", ha="left" if dx >= 0 else "right")
    else:
        _no_data(ax)
    ax.set_xlabel("aggregate output tokens/s (all requests)")
    ax.set_ylabel("per-request decode tokens/s (p50)")
    ax.set_title(title or "Per-request speed vs total throughput")
    ax.grid(True, alpha=0.3)
    return fig


def varied_lengths(stages: list[dict]) -> bool:
    """Some stage sent more than one bin of input or output lengths (a mix, not fixed lengths)."""
    return any(sum(1 for c in (s.get("length_hist") or {}).get(which, []) if c) > 1
               for s in stages for which in ("input", "output"))


def lengths_figure(stages: list[dict]) -> Figure:
    """The workload sent: requests per bin of input tokens (left) and output tokens (right), one
    step line per stage (``length_hist``, log x)."""
    fig = new_figure(ncols=2, size=(10.0, 4.2))
    for ax, which in zip(fig.axes, ("input", "output"), strict=True):
        for s in stages:
            h = s.get("length_hist") or {}
            if sum(h.get(which, [])):
                ax.stairs(h[which][1:], h["edges"], label=f"stage {s.get('index')}")
        ax.set_xscale("log")
        ax.set_xlabel(f"{which} tokens per request")
        ax.set_ylabel("requests")
        ax.set_title(f"{which.capitalize()} lengths sent")
        ax.legend(fontsize=8)
    return fig


SPEC_CACHE_SERIES = (  # (axes index, stage key, "server." = in the stage's server object, label)
    (0, "server.spec_accept_length", "server accept length (tokens a step)"),
    (0, "tokens_per_chunk", "client tokens per chunk"),
    (1, "server.prefix_cache_hit_rate", "server prefix cache hit rate"),
    (1, "cached_share", "client cached share (usage)"),
)


def _stage_value(stage: dict, key: str):
    if key.startswith("server."):
        return (stage.get("server") or {}).get(key.removeprefix("server."))
    return stage.get(key)


def has_server_spec_or_cache(stages: list[dict]) -> bool:
    """Some stage has the server's accept length or prefix cache hit rate over its window."""
    return any(_stage_value(s, key) is not None for s in stages for _, key, _ in SPEC_CACHE_SERIES
               if key.startswith("server."))


def spec_cache_figure(stages: list[dict]) -> Figure:
    """Per stage, vs its load: the server's speculative accept length beside the client's tokens
    per chunk (left), the server's prefix cache hit rate beside the client's cached share (right).
    A stage without a figure has no point."""
    fig = new_figure(ncols=2, size=(10.0, 4.2))
    key = load_key(stages)
    loads = [s.get(key) for s in stages]
    for ax_index, name, label in SPEC_CACHE_SERIES:
        points = sorted((s[key], _stage_value(s, name)) for s in stages
                        if s.get(key) is not None and _stage_value(s, name) is not None)
        if points:
            fig.axes[ax_index].plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    for ax, title, ylabel in zip(fig.axes, ("Speculative decoding", "Prefix cache"),
                                 ("tokens", "share of prompt tokens"), strict=True):
        load_axis(ax, loads, key)
        ax.set_title(title)
        ax.set_ylabel(ylabel)
        if ax.lines:
            ax.legend(fontsize=8)
    fig.axes[1].set_ylim(0, 1.05)
    return fig


def build_run_figures(summary: dict) -> dict[str, Figure]:
    """The figures of one run, keyed by PNG base name: throughput, latency, tradeoff, the length
    mix sent (``lengths``) when the lengths varied, and ``spec_cache`` when the server reported its
    accept length or prefix cache hit rate over a stage's window."""
    stages = summary.get("stages") or []
    knee = knee_of(summary)
    guard = summary.get("guard") or {}
    figures = {
        "throughput": throughput_figure(stages, knee, guard, slo=summary.get("slo")),
        "latency": latency_figure(stages),
        "tradeoff": tradeoff_figure(stages, knee),
    }
    if varied_lengths(stages):
        figures["lengths"] = lengths_figure(stages)
    if any(s.get("output_tokens_per_gpu_per_s") is not None for s in stages):
        figures["pareto"] = pareto_figure(stages)
    if has_server_spec_or_cache(stages):
        figures["spec_cache"] = spec_cache_figure(stages)
    if summary.get("slices"):  # a soak (docs/soak.md): its time slices and their trend
        figures["slices"] = slices_figure(summary)
    return figures


def pareto_figure(stages: list[dict]) -> Figure:
    """Output tok/s per GPU (y) vs tok/s per user (x: the per-request decode rate p50), one point
    per stage labelled with its load; the stages on the Pareto front (``loadgen.stats.cost.pareto_front``:
    no other stage is faster per user and cheaper per GPU) joined by a line, ``Pareto front``."""
    fig = new_figure()
    ax = fig.axes[0]
    points = [(s["decode_tps_p50"], s["output_tokens_per_gpu_per_s"], stage_label(s)) for s in stages
              if s.get("decode_tps_p50") is not None and s.get("output_tokens_per_gpu_per_s") is not None]
    if points:
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", linestyle="none",
                color="tab:gray", label="stages")
        front = sorted(points[i] for i in pareto_front([(x, y) for x, y, _ in points]))
        ax.plot([p[0] for p in front], [p[1] for p in front], marker="o", color="tab:blue",
                label="Pareto front")
        for x, y, text in points:
            ax.annotate(text, (x, y), xytext=(4, 4), textcoords="offset points", fontsize=LABEL_PT)
        ax.set_xlim(0, max(p[0] for p in points) * 1.15 or 1.0)
        ax.set_ylim(0, max(p[1] for p in points) * 1.15 or 1.0)
        ax.legend(fontsize=8)
    else:
        _no_data(ax)
    ax.set_xlabel("tokens/s per user (per-request decode rate, p50)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.set_title("Per-user speed vs per-GPU throughput")
    ax.grid(True, alpha=0.3)
    return fig


def save_figures(figures: dict[str, Figure], out_dir) -> dict[str, bytes]:
    """Render each figure to ``<out_dir>/<name>.png`` (atomically); returns the PNG bytes."""
    pngs = {}
    for name, fig in figures.items():
        pngs[name] = figure_png(fig)
        atomic_write_bytes(Path(out_dir) / f"{name}.png", pngs[name])
    return pngs
