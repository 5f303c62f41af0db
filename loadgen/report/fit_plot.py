"""The calibration's fit plot: what ``llm-loadgen calibrate`` measured beside what its model says.

Input: the calibration's ``<preset>.fit.json`` as a dict (``loadgen.whatif.__main__`` writes it;
``loadgen.whatif.calibrate.fit`` fills ``step_residuals``). Output: one Figure of three panels,
built as ``loadgen.report.plots`` builds its figures (Agg canvas, no pyplot; tests read the
series). With a = step_base_ms, b = step_per_seq_ms, p = step_per_prefill_token_us / 1000 (ms per
token), q = step_per_prefill_pair_ns / 1e6 (ms per prompt token and earlier token of its sequence, 0
unless fitted) of the fitted preset and d0 the client's TTFT overhead (0 unless the fit separated it):

- ``decode step time vs running batch`` (the batch as the fit counts it, 1 + (C - 1) n / (n + 1):
  ``loadgen.whatif.calibrate.occupied_batch``): per prompt length I, the measured step d (TPOT p50
  x L, or the median chunk gap where prompts are rare: ``loadgen.whatif.calibrate.decode_step``)
  (``measured I=..``, one point per fitted stage, labelled with its residual (model - measured) /
  measured) and the model's value there, a + b x batch + p x x (``model I=..``; x: the stage's
  prefill tokens per step); the line a + b x batch (``a + b x batch``, the step without prefill)
  and, where no line fits the measured steps, the preset's ``step_batch_ms`` knots the engine
  interpolates instead (``step_batch_ms knots``; ``loadgen.whatif.calibrate.batch_knots``);
- ``TTFT at C=1 vs prompt length``: the measured TTFT p50 at C=1 per prompt length
  (``measured TTFT``, labelled with residuals), the server's own prompt time there when the fit
  used it (``server prompt``, llama.cpp's counters) and the model's curve
  a + b + p x I + q x I (I - 1) / 2 + d0 (``a + b + p x I`` ...; a line when q is 0);
- ``replaying the calibration run``: the fitted preset's prediction of the run it was fitted to,
  (predicted - measured) / measured in % per stage for output tok/s, TTFT p50 and TPOT p50
  (``stage_residuals``); a stage left out of the fit (server_over_capacity) is drawn hollow.

Import lazily (matplotlib), as ``loadgen.report.files`` does with ``plots``.
"""

from __future__ import annotations

from matplotlib.figure import Figure

from loadgen.report.plots import concurrency_axis, new_figure

DECODE, TTFT, SERVER_PROMPT = "decode step", "TTFT at C=1", "server prompt at C=1"  # calibrate's equation kinds
REPLAY_KEYS = (("output_tokens_per_s", "out tok/s"), ("ttft_p50_s", "TTFT p50"), ("tpot_p50_s", "TPOT p50"))


def model_ms(fit_doc: dict) -> tuple[float, float, float, float]:
    """(a, b, p, d0) in ms, ms per sequence, ms per prefill token and ms, from the fitted preset."""
    preset = fit_doc["preset"]
    return (float(preset["step_base_ms"]), float(preset["step_per_seq_ms"]),
            float(preset["step_per_prefill_token_us"]) / 1e3, (fit_doc.get("client_overhead_s") or 0.0) * 1e3)


def pair_ms(fit_doc: dict) -> float:
    """q in ms per (prompt token, earlier token of its sequence); 0 in a preset without the key."""
    return float(fit_doc["preset"].get("step_per_prefill_pair_ns") or 0.0) / 1e6


def _measured(fit_doc: dict, what: str) -> list[dict]:
    """The equations of one kind that carry their measured and model values (a fit.json written
    before they were kept has only ``rel``: nothing to draw)."""
    return [r for r in fit_doc.get("step_residuals") or []
            if r.get("what") == what and r.get("measured_s") is not None and r.get("model_s") is not None]


def _residual_labels(ax, xs: list, ys: list, rels: list, series: int = 0) -> None:
    """Each point's residual beside it; a second series' labels below its points, so two prompt
    lengths measured at the same batch do not print over each other."""
    for x, y, rel in zip(xs, ys, rels, strict=True):
        ax.annotate(f"{rel:+.1%}", (x, y), xytext=(6, 3 if series % 2 == 0 else -10), textcoords="offset points",
                    fontsize=7)


def _no_data(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="gray", fontsize=8)


def _decode_panel(ax, fit_doc: dict) -> None:
    a, b, _, _ = model_ms(fit_doc)
    rows = _measured(fit_doc, DECODE)
    batches = sorted({r["batch"] for r in rows})
    for series, n_in in enumerate(sorted({r["input_tokens"] for r in rows})):
        mine = sorted((r for r in rows if r["input_tokens"] == n_in), key=lambda r: r["batch"])
        xs = [r["batch"] for r in mine]
        measured = [r["measured_s"] * 1e3 for r in mine]
        line = ax.plot(xs, measured, marker="o", linestyle="none", label=f"measured I={n_in}")[0]
        ax.plot(xs, [r["model_s"] * 1e3 for r in mine], marker="x", linestyle="-", color=line.get_color(),
                alpha=0.7, label=f"model I={n_in}")
        _residual_labels(ax, xs, measured, [r["rel"] for r in mine], series)
    if batches:
        grid = [batches[0] * (batches[-1] / batches[0]) ** (k / 64) for k in range(65)]  # straight, on a log x
        ax.plot(grid, [a + b * x for x in grid], linestyle="--", color="gray",
                label=f"a + b x batch ({a:.3g} + {b:.3g} x batch ms)")
        if knots := fit_doc["preset"].get("step_batch_ms"):  # where no line fits: the preset's step as measured
            ax.plot([k[0] for k in knots], [k[1] for k in knots], linestyle=":", color="black", marker="s",
                    markersize=3, label="step_batch_ms knots (the preset's batch part)")
        concurrency_axis(ax, batches, "running batch (requests)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
    else:
        _no_data(ax, "no decode equations with measured values\n(re-run calibrate)")
    ax.set_ylabel("decode step (ms)")
    ax.set_title("Decode step time vs running batch", fontsize=10)


def _ttft_panel(ax, fit_doc: dict) -> None:
    a, b, p, d0 = model_ms(fit_doc)
    q = pair_ms(fit_doc)
    rows = sorted(_measured(fit_doc, TTFT), key=lambda r: r["input_tokens"])
    if not rows:
        _no_data(ax, "no TTFT at C=1 in the fit")
    else:
        xs = [r["input_tokens"] for r in rows]
        ys = [r["measured_s"] * 1e3 for r in rows]
        ax.plot(xs, ys, marker="o", linestyle="none", color="tab:blue", label="measured TTFT p50")
        _residual_labels(ax, xs, ys, [r["rel"] for r in rows])
        server = sorted(_measured(fit_doc, SERVER_PROMPT), key=lambda r: r["input_tokens"])
        if server:
            sx, sy = [r["input_tokens"] for r in server], [r["measured_s"] * 1e3 for r in server]
            ax.plot(sx, sy, marker="s", linestyle="none", color="tab:green", label="server prompt time")
            _residual_labels(ax, sx, sy, [r["rel"] for r in server], 1)
        top = max(xs) * 2.5 if q else max(xs) * 1.25  # with q: how the square bends beyond the lengths fitted
        grid = [top * k / 64 for k in range(65)]
        name = "a + b + p x I" + (" + q x I(I-1)/2" if q else "") + (" + d0" if d0 else "")
        ax.plot(grid, [a + b + d0 + p * x + q * x * (x - 1) / 2 for x in grid], color="tab:orange",
                label=f"{name} (p = {p * 1e3:.3g} us/token{f', q = {q * 1e6:.3g} ns' if q else ''}"
                      f"{f', d0 = {d0:.3g} ms' if d0 else ''})")
        ax.set_xlim(0, top)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
    ax.set_xlabel("prompt tokens (I)")
    ax.set_ylabel("TTFT at C=1 (ms)")
    ax.set_title("TTFT at C=1 vs prompt length", fontsize=10)
    ax.grid(True, alpha=0.3)


def _replay_panel(ax, fit_doc: dict) -> None:
    stages = sorted(fit_doc.get("stage_residuals") or [], key=lambda r: r["concurrency"])
    plotted = False
    for key, name in REPLAY_KEYS:
        pts = [(r["concurrency"], r[key]["rel"] * 100, bool(r.get("flags"))) for r in stages
               if (r.get(key) or {}).get("rel") is not None]
        if not pts:
            continue
        line = ax.plot([x for x, _, _ in pts], [y for _, y, _ in pts], marker="o", label=name)[0]
        left_out = [(x, y) for x, y, flagged in pts if flagged]
        if left_out:
            ax.plot([x for x, _ in left_out], [y for _, y in left_out], marker="o", markersize=10,
                    linestyle="none", markerfacecolor="white", color=line.get_color(),
                    label=f"{name}: not fitted (server_over_capacity)")
        plotted = True
    ax.axhline(0, color="gray", linewidth=0.8)
    concurrency_axis(ax, [r["concurrency"] for r in stages])
    ax.set_ylabel("(predicted - measured) / measured (%)")
    ax.set_title("Replaying the calibration run", fontsize=10)
    if plotted:
        ax.legend(fontsize=7)
    else:
        _no_data(ax, "no stage residuals")


def fit_figure(fit_doc: dict) -> Figure:
    """The three panels of the module docstring, titled with the run the preset was fitted to."""
    fig = new_figure(ncols=3, size=(14.0, 4.4))
    _decode_panel(fig.axes[0], fit_doc)
    _ttft_panel(fig.axes[1], fit_doc)
    _replay_panel(fig.axes[2], fit_doc)
    fig.suptitle(f"Calibration fit of {fit_doc.get('run') or 'a run'} (residual: (model - measured) / measured)",
                 fontsize=10)
    return fig
