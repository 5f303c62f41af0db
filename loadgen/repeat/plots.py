"""Plots of repeated sweeps: each stage's interval, and whether intervals hold a known truth.

Built as ``loadgen.report.plots`` builds its figures (Agg canvas, no pyplot; tests read the
series: ``ax.lines``, the intervals' ``LineCollection.get_segments()``, the bars' heights). Import
lazily (matplotlib).

- ``intervals_figure(repeat)`` (``intervals.png`` of a repeat folder, ``llm-loadgen --repeat N``):
  one panel per metric of ``repeat_summary.SHOWN``, vs the load asked: every repetition's value
  (``repetitions``, dots), the mean (``mean``) and its 95 % Student t interval as a vertical bar
  (``95 % interval``), mean +- t(0.975, n-1) x sd / sqrt(n) (``loadgen.repeat.stats.mean_interval``).
- ``covered_figure(rows)`` (``intervals.png`` of the coverage bench): one panel per metric, each
  interval a vertical bar from low / truth to high / truth (so the true value is 1 on every
  panel, the line ``true value``), grouped by load; ``covered`` bars green, ``missed`` bars red;
  the mean a dot.
- ``coverage_figure(table)`` (``coverage.png``): the share of intervals holding the truth per
  metric and in all (``loadgen.report.coverage.coverage_table``: k / n, its binomial standard
  error sqrt(s (1 - s) / n) as the error bar), with the nominal 95 % and the target.
"""

from __future__ import annotations

from matplotlib.figure import Figure

from loadgen.repeat.summary import SHOWN
from loadgen.report.plots import load_axis, new_figure
from loadgen.stats.metrics import STAGE_METRICS

METRICS = {m.key: m for m in STAGE_METRICS}
COVERED, MISSED = "tab:green", "tab:red"


def _shown(key: str) -> tuple[str, float]:
    """(axis title, scale to the shown unit) of a stage metric."""
    m = METRICS[key]
    return m.title, m.shown.scale


def intervals_figure(repeat: dict) -> Figure:
    """Per ``SHOWN`` metric, per stage: repetitions, mean and 95 % interval (module docstring)."""
    fig = new_figure(ncols=len(SHOWN), size=(4.0 * len(SHOWN), 4.0))
    key = repeat.get("load")
    loads = [s["load"] for s in repeat.get("stages") or []]
    for ax, metric in zip(fig.axes, SHOWN, strict=True):
        title, scale = _shown(metric)
        dots_x, dots_y, mean_x, mean_y, bars = [], [], [], [], []
        for stage in repeat.get("stages") or []:
            iv = stage["metrics"].get(metric)
            if iv is None:
                continue
            for v in iv.get("values") or []:
                if v is not None:
                    dots_x.append(stage["load"])
                    dots_y.append(v * scale)
            if iv.get("mid") is not None:
                mean_x.append(stage["load"])
                mean_y.append(iv["mid"] * scale)
            if iv.get("low") is not None:
                bars.append((stage["load"], iv["low"] * scale, iv["high"] * scale))
        if dots_x:
            ax.plot(dots_x, dots_y, marker=".", linestyle="none", color="tab:gray", alpha=0.6, label="repetitions")
        if bars:
            ax.vlines([b[0] for b in bars], [b[1] for b in bars], [b[2] for b in bars], colors="tab:blue",
                      linewidth=3, alpha=0.5, label="95 % interval")
        if mean_x:
            ax.plot(mean_x, mean_y, marker="o", color="tab:blue", label="mean")
            ax.legend(fontsize=7)
        load_axis(ax, loads, key)
        ax.set_title(title, fontsize=10)
        ax.set_ylim(bottom=0)
    fig.suptitle(f"{len(repeat.get('repetitions') or [])} repetitions: per stage, mean and 95 % Student t interval",
                 fontsize=10)
    return fig


def covered_figure(rows: list[dict], load_unit: str = "") -> Figure:
    """Each interval / truth as a bar, covered green and missed red, grouped by load (module docstring;
    a group is labelled ``<load> <load_unit>``). ``rows``: {"metric", "load", "experiment", "truth",
    "low", "mid", "high", "covered"}."""
    metrics = list(dict.fromkeys(r["metric"] for r in rows))
    fig = new_figure(ncols=max(1, len(metrics)), size=(7.0 * max(1, len(metrics)), 4.2))
    for ax, metric in zip(fig.axes, metrics, strict=False):
        mine = sorted((r for r in rows if r["metric"] == metric), key=lambda r: (r["load"], r["experiment"]))
        xs = list(range(len(mine)))
        for covered, color, label in ((True, COVERED, "covered"), (False, MISSED, "missed")):
            pick = [(x, r) for x, r in zip(xs, mine, strict=True) if r["covered"] is covered]
            if pick:
                ax.vlines([x for x, _ in pick], [r["low"] / r["truth"] for _, r in pick],
                          [r["high"] / r["truth"] for _, r in pick], colors=color, linewidth=3,
                          label=f"{label} ({len(pick)})")
                ax.plot([x for x, _ in pick], [r["mid"] / r["truth"] for _, r in pick], marker=".",
                        linestyle="none", color="black", markersize=4)
        ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="true value")
        loads = list(dict.fromkeys(r["load"] for r in mine))
        for load in loads:  # one group per load: its first and last interval's positions
            at = [x for x, r in zip(xs, mine, strict=True) if r["load"] == load]
            ax.axvline(at[-1] + 0.5, color="lightgray", linewidth=0.8)
            ax.text((at[0] + at[-1]) / 2, 1.0, f"{load:g} {load_unit}".strip(), transform=ax.get_xaxis_transform(),
                    ha="center", va="bottom", fontsize=8)
        ax.set_xticks([])
        ax.set_xlabel("intervals, grouped by load (top labels), one per experiment")
        title, _ = _shown(metric) if metric in METRICS else (metric, 1.0)
        ax.set_ylabel("interval / true value")
        ax.set_title(f"{title}: 95 % intervals", fontsize=10, pad=14)
        ax.legend(fontsize=7, loc="best")
    return fig


def coverage_figure(table: list[dict], nominal: float = 0.95, target: float | None = None) -> Figure:
    """Bars: coverage in % per metric and ``all``, error bar 1 binomial standard error, labelled
    ``k/n``; lines at the nominal confidence and the target. ``table``: ``coverage_table``'s."""
    fig = new_figure(size=(6.0, 4.2))
    ax = fig.axes[0]
    names = [_shown(t["metric"])[0] if t["metric"] in METRICS else t["metric"] for t in table]
    shares = [t["share"] * 100 for t in table]
    ax.bar(names, shares, yerr=[t["se"] * 100 for t in table], capsize=6,
           color=[COVERED if t["metric"] != "all" else "tab:blue" for t in table])
    for i, t in enumerate(table):
        ax.text(i, 50, f"{t['covered']}/{t['n']}", ha="center", va="center", color="white", fontsize=10)
    ax.axhline(nominal * 100, color="black", linestyle="--", linewidth=1, label=f"nominal {nominal:.0%}")
    if target is not None:
        ax.axhline(target * 100, color=MISSED, linestyle=":", linewidth=1.2, label=f"target {target:.0%}")
    ax.set_ylim(0, 105)
    ax.set_ylabel("intervals holding the true value (%)")
    ax.set_title("Coverage of the 95 % intervals (error bar: 1 binomial SE)", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    return fig
