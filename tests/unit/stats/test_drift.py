"""The drift verdict on synthetic slice series (loadgen.stats.drift): steady noise over many seeds
(false alarms counted), linear drift (slope recovered within its interval), since when, and the
trend test's parts against known values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadgen.stats.drift import DriftConfig, hinge_start, mann_kendall, normal_quantile, stage_drift, trend

SLICE_S = 60.0


def slices(n: int, **series) -> list[dict]:
    """n full 60 s slices; ``series``: column -> array of n values."""
    rows = []
    for i in range(n):
        row = {"start_s": i * SLICE_S, "duration_s": SLICE_S}
        row.update({k: float(v[i]) for k, v in series.items()})
        rows.append(row)
    return rows


def steady(rng, n: int) -> dict:
    """A steady server: 1000 tok/s +-3 %, p99s lognormal around 400 ms and 40 ms (a p99 of a minute
    is noisy), a few errors, KV use around 0.6, a preemption now and then."""
    return {
        "output_tokens_per_s": 1000 * (1 + 0.03 * rng.standard_normal(n)),
        "ttft_p99_s": 0.4 * rng.lognormal(0, 0.15, n),
        "itl_p99_s": 0.04 * rng.lognormal(0, 0.1, n),
        "itl_p50_s": 0.02 * rng.lognormal(0, 0.03, n),
        "error_rate": rng.binomial(500, 0.002, n) / 500,
        "server_kv_usage_mean": np.clip(0.6 + 0.03 * rng.standard_normal(n), 0, 1),
        "server_preemptions": rng.poisson(0.2, n),
    }


def test_normal_quantile_and_mann_kendall_known_values():
    assert normal_quantile(0.975) == pytest.approx(1.959964, abs=1e-6)
    assert normal_quantile(0.5) == pytest.approx(0.0, abs=1e-9)
    s, var, p = mann_kendall(np.array([1.0, 2.0, 3.0, 4.0, 5.0]))
    assert (s, var) == (10.0, 5 * 4 * 15 / 18) and p == pytest.approx(math.erfc(9 / math.sqrt(var) / math.sqrt(2)))
    assert mann_kendall(np.zeros(10)) == (0.0, 0.0, 1.0)  # all tied: no trend, never an error


def test_sen_slope_ignores_an_outlier_that_would_tilt_least_squares():
    t = np.arange(20) / 10.0
    y = 2.0 * t + 1.0
    y[-1] += 50.0
    tr = trend(t, y)
    assert tr.slope == pytest.approx(2.0) and tr.low <= 2.0 <= tr.high and tr.p < 1e-4


def test_a_steady_server_raises_few_false_alarms_over_many_seeds():
    """4 h of 60 s slices, 300 seeds: no stage flagged (the threshold, not only the p-value, must be
    passed). The count is what docs/soak.md quotes."""
    alarms = {}
    for seed in range(300):
        d = stage_drift(slices(240, **steady(np.random.default_rng(seed), 240)), SLICE_S)
        assert d["drift"] is not None
        for m in d["moved"]:
            alarms[m["series"]] = alarms.get(m["series"], 0) + 1
    assert sum(alarms.values()) == 0, alarms


def test_a_short_noisy_soak_raises_few_false_alarms_too():
    """1 h of 60 s slices with p99s twice as noisy: at most 1 % of 300 seeds flagged."""
    flagged = 0
    for seed in range(300):
        rng = np.random.default_rng(1000 + seed)
        series = steady(rng, 60)
        series["ttft_p99_s"] = 0.4 * rng.lognormal(0, 0.3, 60)
        flagged += bool(stage_drift(slices(60, **series), SLICE_S)["drift"])
    assert flagged <= 3, flagged


@pytest.mark.parametrize("pct_per_h", [-15.0, -30.0, 25.0])
def test_linear_throughput_drift_is_flagged_and_its_slope_recovered(pct_per_h):
    errors, covered = [], 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        series = steady(rng, 240)
        hours = (np.arange(240) + 0.5) * SLICE_S / 3600
        series["output_tokens_per_s"] = 1000 * (1 + pct_per_h / 100 * hours) * (1 + 0.03 * rng.standard_normal(240))
        d = stage_drift(slices(240, **series), SLICE_S)
        (moved,) = d["moved"]
        assert moved["series"] == "throughput" and d["verdict"].startswith("drift: throughput")
        covered += moved["low_per_h"] <= 1000 * pct_per_h / 100 <= moved["high_per_h"]
        errors.append(moved["slope_per_h"] / (1000 * pct_per_h / 100) - 1)
    assert max(abs(e) for e in errors) < 0.05, errors
    assert covered >= 18  # a 99 % interval (on independent slices) misses the truth rarely


def test_kv_use_and_ttft_drift_and_since_when():
    rng = np.random.default_rng(7)
    series = steady(rng, 240)
    hours = (np.arange(240) + 0.5) * SLICE_S / 3600
    ramp = np.maximum(hours - 2.0, 0)  # steady for 2 h, then KV use +0.1/h and TTFT p99 +50 %/h of its start
    series["server_kv_usage_mean"] += 0.1 * ramp
    series["ttft_p99_s"] *= 1 + 0.5 * ramp
    d = stage_drift(slices(240, **series), SLICE_S)
    moved = {m["series"]: m for m in d["moved"]}
    assert set(moved) == {"kv_usage", "ttft_p99"}
    assert moved["kv_usage"]["since_s"] == pytest.approx(7200, abs=900)
    assert moved["ttft_p99"]["since_s"] == pytest.approx(7200, abs=1800)


def test_hinge_start_finds_the_bend():
    t = np.linspace(0, 4, 200)
    assert hinge_start(t, np.where(t < 1.5, 5.0, 5.0 + 2 * (t - 1.5))) == pytest.approx(1.5, abs=0.05)


def test_too_few_slices_give_no_verdict_and_thresholds_are_configurable():
    rng = np.random.default_rng(3)
    assert stage_drift(slices(5, **steady(rng, 5)), SLICE_S)["drift"] is None
    series = steady(rng, 60)
    series["output_tokens_per_s"] = 1000 * (1 - 0.05 * (np.arange(60) + 0.5) / 60) + rng.standard_normal(60)
    assert not stage_drift(slices(60, **series), SLICE_S)["drift"]  # -5 %/h: under the 10 %/h default
    d = stage_drift(slices(60, **series), SLICE_S, DriftConfig(throughput_pct_per_h=2.0))
    assert [m["series"] for m in d["moved"]] == ["throughput"]


def test_the_slices_figure_draws_each_series_and_the_trend_of_what_moved():
    from loadgen.report.soak_plots import slices_figure

    rng = np.random.default_rng(11)
    series = steady(rng, 120)
    series["output_tokens_per_s"] = 1000 * (1 - 0.2 * (np.arange(120) + 0.5) / 60) + rng.standard_normal(120)
    rows = [dict(r, stage=0) for r in slices(120, **series)]
    drift = stage_drift(rows, SLICE_S)
    fig = slices_figure({"slices": rows, "stages": [{"index": 0, "drift": drift}]})
    throughput = fig.axes[0]
    labels = [line.get_label() for line in throughput.lines]
    assert labels == ["stage 0", "stage 0 trend"] and fig._suptitle.get_text() == "stage 0: drift in throughput"
    t, y = throughput.lines[1].get_xdata(), throughput.lines[1].get_ydata()
    slope_per_min = (y[1] - y[0]) / (t[1] - t[0])
    assert slope_per_min == pytest.approx(-200 / 60, rel=0.05)  # -20 %/h of 1000 tok/s
    assert [line.get_label() for line in fig.axes[1].lines] == ["stage 0"]  # TTFT steady: no trend line


def test_a_latency_drift_with_the_client_lag_growing_too_says_it_may_be_the_client():
    rng = np.random.default_rng(12)
    series = steady(rng, 120)
    hours = (np.arange(120) + 0.5) * SLICE_S / 3600
    series["ttft_p99_s"] *= 1 + 0.5 * hours
    series["client_loop_lag_s"] = 0.002 + 0.004 * hours + 0.0002 * rng.standard_normal(120)
    d = stage_drift(slices(120, **series), SLICE_S)
    assert d["client_lag"]["slope_per_h"] == pytest.approx(0.004, rel=0.1)
    assert "the client's loop lag grew too (+4 ms/h)" in d["verdict"]
    series["client_loop_lag_s"] = 0.002 + 0.0002 * rng.standard_normal(120)  # a steady client: not said
    d = stage_drift(slices(120, **series), SLICE_S)
    assert d["client_lag"] is None and "client" not in d["verdict"]
