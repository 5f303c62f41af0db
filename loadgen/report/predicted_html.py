"""The HTML of a prediction: the banner of a what-if report, and the calibration it came from.

A what-if summary (``loadgen.whatif.summary``) has ``predicted: true``, ``predicted_from`` (the
preset and the changes) and, when the preset was calibrated, ``calibration``: its
``<preset>.fit.json`` (``loadgen.whatif.__main__``) with ``file``, the path it was read from.
``predicted_banner`` says at the top of report.html that every row is predicted and from which
calibration; ``calibration_section`` shows the fit (its parameters, the fit plot
``loadgen.report.fit_plot``, each equation's measured and model value, the replay's residuals
per stage); ``render_fit_html`` is the same section as a page of its own, ``<preset>.fit.html``,
which ``llm-loadgen calibrate`` writes beside the preset. Pure: dicts and PNG bytes in, HTML out.
"""

from __future__ import annotations

from loadgen.report.html_page import esc, kv_table, page, png_img, table_html

FIT_FIGURE = "calibration_fit"  # the fit plot's PNG base name in a what-if folder (``<preset>.fit.png`` beside a preset)
STAGE_KEYS = (("output_tokens_per_s", "out tok/s", 1.0, "{:,.0f}"), ("ttft_p50_s", "TTFT p50 ms", 1e3, "{:.1f}"),
              ("tpot_p50_s", "TPOT p50 ms", 1e3, "{:.2f}"))


def calibration_source(summary: dict) -> str:
    """One line: the preset and, when it was calibrated, the run, stages and fit file."""
    preset = (summary.get("predicted_from") or {}).get("preset") or "an unnamed preset"
    fit = summary.get("calibration")
    if not fit:
        return (f"preset {preset}, which was not calibrated to a run (no fit file beside it): its engine "
                "parameters are the preset's own")
    stages = ", ".join(f"C={c}" for c in fit.get("fitted_stages") or [])
    return (f"preset {preset}, calibrated to the run {fit.get('run')} (fitted on stages {stages}; fit file "
            f"{fit.get('file') or '-'})")


def predicted_banner(summary: dict) -> str:
    """The banner of a predicted report: nothing in it was measured, and where it came from."""
    changes = {k: v for k, v in ((summary.get("predicted_from") or {}).get("changes") or {}).items()
               if k != "preset" and v not in (None, False)}
    lines = ["PREDICTED, not measured: every row, figure and answer in this report comes from the "
             "simulator's engine run in virtual time; no request was sent to a server.",
             f"Predicted from {calibration_source(summary)}."]
    if workload := (summary.get("scenario") or {}).get("predicted_workload"):
        lines.append(f"Workload predicted: {workload}.")
    if changes:
        lines.append("Options: " + ", ".join(f"{k}={v}" for k, v in changes.items()) + ".")
    lines.append("Confirm the one stage it suggests with a real run before acting on it.")
    return '<div class="predicted" id="predicted">' + "".join(f"<div>{esc(t)}</div>" for t in lines) + "</div>"


def _fmt(value, scale: float, pattern: str) -> str:
    return "-" if value is None else pattern.format(value * scale)


def _pct(rel) -> str:
    return "-" if rel is None else f"{rel:+.1%}"


def calibration_section(fit: dict, png: bytes | None) -> list[str]:
    """The fit: parameters, the fit plot (when drawn), each equation, the replay per stage."""
    preset = fit.get("preset") or {}
    params = {
        "fitted to": fit.get("run"),
        "fitted stages": ", ".join(f"C={c}" for c in fit.get("fitted_stages") or []),
        "model": "decode step = a + b x batch + p x prefill tokens in the step; TTFT at C=1 = a + b + p x I"
                 + (" + d0" if fit.get("client_overhead_s") is not None else ""),
        "a (step_base_ms)": preset.get("step_base_ms"),
        "b (step_per_seq_ms)": preset.get("step_per_seq_ms"),
        "p (step_per_prefill_token_us)": preset.get("step_per_prefill_token_us"),
        "d0 (client TTFT overhead, ms)": None if fit.get("client_overhead_s") is None
        else round(fit["client_overhead_s"] * 1e3, 3),
        "mean accept length (tokens a step)": round(fit.get("accept_length") or 1.0, 3),
        "KV tokens": preset.get("kv_tokens"),
    }
    equations = [[r.get("what"), r.get("input_tokens"), r.get("concurrency"), r.get("batch"),
                  _fmt(r.get("prefill_tokens"), 1.0, "{:.1f}"), _fmt(r.get("measured_s"), 1e3, "{:.3f}"),
                  _fmt(r.get("model_s"), 1e3, "{:.3f}"), _pct(r.get("rel"))] for r in fit.get("step_residuals") or []]
    replay = []
    for r in fit.get("stage_residuals") or []:
        row = [r.get("concurrency")]
        for key, _, scale, pattern in STAGE_KEYS:
            cell = r.get(key) or {}
            row += [_fmt(cell.get("measured"), scale, pattern), _fmt(cell.get("predicted"), scale, pattern),
                    _pct(cell.get("rel"))]
        replay.append(row + [", ".join(r.get("flags") or []) or "-"])
    replay_head = ["C"] + [f"{name} {which}" for _, name, _, _ in STAGE_KEYS
                           for which in ("measured", "predicted", "error")] + ["not fitted"]
    return [
        "<h2>Calibration</h2>",
        kv_table(params, "calibration"),
        png_img(FIT_FIGURE, png) if png else '<p class="muted">Fit plot not drawn.</p>',
        "<h3>The fit's equations (residual: (model - measured) / measured)</h3>",
        table_html(["equation", "prompt tokens", "C", "batch", "prefill tokens a step", "measured ms",
                    "model ms", "residual"], equations, "fit-equations"),
        "<h3>The preset replaying the calibration run (error: (predicted - measured) / measured)</h3>",
        table_html(replay_head, replay, "fit-stages"),
    ]


def render_fit_html(fit: dict, png: bytes | None, preset: str) -> str:
    """``<preset>.fit.html``: the calibration of ``preset`` alone."""
    return page(f"llm-loadgen calibration: {preset}", [
        f"<h1>Calibration of {esc(preset)}</h1>",
        f'<p>A simulator preset fitted to the measured run {esc(fit.get("run"))}. Ask it what-if questions: '
        f"<code>llm-loadgen whatif {esc(preset)} --input-tokens ... --out DIR</code>; every figure it gives is "
        "predicted.</p>",
        *calibration_section(fit, png),
    ])
