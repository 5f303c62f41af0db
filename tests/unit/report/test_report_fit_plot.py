"""The calibration's fit plot and the predicted report: series read from the Figure, HTML sections."""

from __future__ import annotations

import json
import math

import pytest

from loadgen.engine_model.engine import EngineParams
from loadgen.report.files import write_derived
from loadgen.report.fit_plot import fit_figure, model_ms
from loadgen.report.html import render_report_html
from loadgen.report.predicted_html import FIT_FIGURE, render_fit_html
from loadgen.sim.config import load
from loadgen.whatif.calibrate import fit, residuals
from loadgen.whatif.rows import stage_row
from loadgen.whatif.summary import WhatIf, predict
from loadgen.whatif.virtual_sweep import run_sweep, stage_rules

HIDDEN = EngineParams(kv_tokens=2_000_000, block_size=1, max_running=1024, prefill_chunk_tokens=8192,
                      step_base_s=0.012, step_per_seq_s=0.0004, step_per_prefill_token_s=0.00003,
                      spec_accept=(0.2, 0.3, 0.5))
LOADS = [1, 4, 16]
PLAN = stage_rules(ramp_s=0, warmup_s=2, duration_s=6)


def _summary(n_in: int) -> dict:
    recs = run_sweep(HIDDEN, LOADS, n_in, 100, PLAN)
    return {"scenario": {"input_tokens": n_in, "output_tokens": 100},
            "stages": [stage_row(r, HIDDEN.kv_tokens) for r in recs],
            "guard": {"capacity_tokens": HIDDEN.kv_tokens}, "server": {"flavor": "sglang", "max_model_len": 32768}}


@pytest.fixture(scope="module")
def fit_doc() -> dict:
    """A fit.json as ``llm-loadgen calibrate`` writes it, fitted on two prompt lengths (the client
    overhead then a fitted term), with one stage flagged as left out of the fit."""
    runs = [_summary(200), _summary(1200)]
    for run in runs:  # a client's own 2 ms on every TTFT, which the virtual run does not have
        for row in run["stages"]:
            row["ttft_p50_s"] += 0.002
    f = fit(runs)
    preset = f.preset(runs[0])
    res = residuals(runs[0], [dict(r, output_tokens_per_s=r["output_tokens_per_s"] * 1.1) for r in runs[0]["stages"]])
    res[-1]["flags"] = ["server_over_capacity"]
    return json.loads(json.dumps({"run": "results/measured", "preset": preset, "accept_length": f.accept_length,
                                  "fitted_stages": f.used_stages, "step_residuals": f.step_residuals,
                                  "client_overhead_s": f.client_overhead_s, "stage_residuals": res}))


def lines(ax) -> dict:
    return {line.get_label(): line for line in ax.lines}


def test_decode_panel_plots_each_equation_s_measured_and_model_step(fit_doc):
    ax = fit_figure(fit_doc).axes[0]
    a, b, p, _ = model_ms(fit_doc)
    got = lines(ax)
    for n_in in (200, 1200):
        eqs = sorted((r for r in fit_doc["step_residuals"] if r["what"] == "decode step" and r["input_tokens"] == n_in),
                     key=lambda r: r["batch"])
        measured, model = got[f"measured I={n_in}"], got[f"model I={n_in}"]
        # x: the step's batch as the fit counts it, at most C (loadgen.whatif.calibrate.decode_step)
        assert list(measured.get_xdata()) == [r["batch"] for r in eqs]
        assert [r["concurrency"] for r in eqs] == LOADS and eqs[0]["batch"] == 1
        assert all(c - 1 < r["batch"] <= c for c, r in zip(LOADS[1:], eqs[1:], strict=True))
        assert list(measured.get_ydata()) == pytest.approx([r["measured_s"] * 1e3 for r in eqs])
        # the model's value is the fitted right-hand side a + b x batch + p x prefill tokens + c x context
        c = fit_doc["preset"]["step_per_context_token_ns"] / 1e6  # ms per context token of a decoder
        assert list(model.get_ydata()) == pytest.approx(
            [a + b * r["batch"] + p * r["prefill_tokens"] + c * r["batch"] * (n_in + 100 / 2) for r in eqs], rel=1e-4)
    base = next(line for label, line in got.items() if label.startswith("a + b x batch"))
    xs, ys = base.get_xdata(), base.get_ydata()
    assert xs[0] == 1 and xs[-1] == eqs[-1]["batch"] and ys == pytest.approx([a + b * x for x in xs])
    labels = sorted(t.get_text() for t in ax.texts)
    assert labels == sorted(f"{r['rel']:+.1%}" for r in fit_doc["step_residuals"] if r["what"] == "decode step")

    assert not any(label.startswith("step_batch_ms") for label in got)  # one line fits: no knots


def test_decode_panel_draws_the_preset_s_batch_knots_where_no_line_fits(fit_doc):
    doc = {**fit_doc, "preset": {**fit_doc["preset"], "step_batch_ms": [[1.0, 6.1], [1.98, 12.2], [3.9, 14.3]]}}
    knots = next(line for label, line in lines(fit_figure(doc).axes[0]).items() if label.startswith("step_batch_ms"))
    assert list(knots.get_xdata()) == [1.0, 1.98, 3.9] and list(knots.get_ydata()) == [6.1, 12.2, 14.3]

def test_ttft_panel_draws_the_prompt_line_through_the_fitted_intercept(fit_doc):
    ax = fit_figure(fit_doc).axes[1]
    a, b, p, d0 = model_ms(fit_doc)
    assert d0 > 0  # two prompt lengths: the client's overhead is fitted, and drawn in the line
    got = lines(ax)
    measured = got["measured TTFT p50"]
    ttft = sorted((r for r in fit_doc["step_residuals"] if r["what"] == "TTFT at C=1"), key=lambda r: r["input_tokens"])
    assert list(measured.get_xdata()) == [200, 1200]
    assert list(measured.get_ydata()) == pytest.approx([r["measured_s"] * 1e3 for r in ttft])
    line = next(line for label, line in got.items() if label.startswith("a + b + p x I + d0"))
    xs, ys = line.get_xdata(), line.get_ydata()
    assert (xs[0], ys[0]) == (0, pytest.approx(a + b + d0)) and list(ys) == pytest.approx([a + b + d0 + p * x for x in xs])
    assert "server prompt time" not in got  # no server prompt times in the fit: no q, a straight line


def test_ttft_panel_bends_with_a_prompt_cost_growing_with_its_square_and_shows_the_server_s_prompt_times(fit_doc):
    server = [{"input_tokens": n, "concurrency": 1, "what": "server prompt at C=1", "batch": 1, "prefill_tokens": n,
               "measured_s": 0.1 * n / 1000, "model_s": 0.1 * n / 1000, "rel": 0.0} for n in (200, 1200)]
    doc = dict(fit_doc, preset=dict(fit_doc["preset"], step_per_prefill_pair_ns=500.0),
               step_residuals=fit_doc["step_residuals"] + server)
    a, b, p, d0 = model_ms(doc)
    got = lines(fit_figure(doc).axes[1])
    assert list(got["server prompt time"].get_xdata()) == [200, 1200]
    curve = next(line for label, line in got.items() if label.startswith("a + b + p x I + q x I(I-1)/2 + d0"))
    xs, ys = curve.get_xdata(), curve.get_ydata()
    assert xs[-1] == 2.5 * 1200  # drawn beyond the longest prompt fitted, where the square shows
    assert list(ys) == pytest.approx([a + b + d0 + p * x + 5e-4 * x * (x - 1) / 2 for x in xs])


def test_replay_panel_shows_each_stage_s_error_in_percent_and_marks_the_unfitted(fit_doc):
    ax = fit_figure(fit_doc).axes[2]
    got = lines(ax)
    tput = got["out tok/s"]
    assert list(tput.get_xdata()) == LOADS
    assert list(tput.get_ydata()) == pytest.approx([10.0] * 3, abs=1e-6)  # predicted = 1.1 x measured
    assert list(got["out tok/s: not fitted (server_over_capacity)"].get_xdata()) == [16]
    assert "TTFT p50" in got and "TPOT p50" in got


def test_a_fit_file_without_measured_values_says_so_rather_than_drawing_nothing(fit_doc):
    old = dict(fit_doc, step_residuals=[{k: r[k] for k in ("input_tokens", "concurrency", "what", "rel")}
                                        for r in fit_doc["step_residuals"]])
    fig = fit_figure(old)
    assert not fig.axes[0].lines and "re-run calibrate" in fig.axes[0].texts[0].get_text()
    assert fig.axes[2].lines  # the replay's residuals are still there


@pytest.fixture(scope="module")
def predicted_summary(fit_doc) -> dict:
    s = predict(load("slo-linear"), WhatIf(100, 50, (1, 4), stages=stage_rules(ramp_s=0, warmup_s=1, duration_s=3)))
    s["predicted_from"] = {"preset": "mine.yaml", "changes": {"input_tokens": 100, "spread": 0, "rates": None}}
    s["calibration"] = {**fit_doc, "file": "mine.fit.json"}
    return s


def test_predicted_report_says_so_first_names_its_calibration_and_shows_the_fit(predicted_summary, tmp_path):
    written = write_derived(tmp_path, predicted_summary)
    assert (tmp_path / f"{FIT_FIGURE}.png").is_file() and FIT_FIGURE in written
    html = (tmp_path / "report.html").read_text()
    banner = html[html.index('id="predicted"'):]
    assert html.index('id="predicted"') < html.index("Saturation knee") < html.index('alt="calibration_fit"')
    assert "PREDICTED, not measured: every row" in banner
    assert "calibrated to the run results/measured" in banner and "fit file mine.fit.json" in banner
    assert "Options: input_tokens=100." in banner  # options not used (None, 0, off) are not listed
    assert "Stages (predicted: every row)" in html and "<title>PREDICTED llm-loadgen" in html
    for table in ('id="calibration"', 'id="fit-equations"', 'id="fit-stages"'):
        assert table in html
    eqs = html[html.index('id="fit-equations"'):html.index('id="fit-stages"')]
    assert eqs.count("<tr>") == 1 + len(predicted_summary["calibration"]["step_residuals"])


def test_an_uncalibrated_preset_is_named_as_such_and_a_measured_report_has_no_banner(predicted_summary):
    bare = {k: v for k, v in predicted_summary.items() if k != "calibration"}
    html = render_report_html(bare, {})
    assert "which was not calibrated to a run" in html and 'id="calibration"' not in html
    measured = {k: v for k, v in bare.items() if k not in ("predicted", "predicted_from")}
    html = render_report_html(measured, {})
    assert 'id="predicted"' not in html and "PREDICTED llm-loadgen" not in html


def test_the_fit_page_beside_a_preset(fit_doc):
    html = render_fit_html(fit_doc, b"\x89PNG fake", "mine.yaml")
    assert "<h1>Calibration of mine.yaml</h1>" in html and 'alt="calibration_fit"' in html
    assert "llm-loadgen whatif mine.yaml" in html
    stages = html[html.index('id="fit-stages"'):]
    assert "+10.0%" in stages and "server_over_capacity" in stages
    assert math.isfinite(fit_doc["client_overhead_s"])
