"""Percentile limits (loadgen.slo.limits): keys, presets, the verdict on merged histograms, the
stage row and the answer. Pure: synthetic histograms, no server."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadgen.config import ConfigError, build_scenario
from loadgen.errors import OVERLOAD_503
from loadgen.report.slo_line import slo_line
from loadgen.run.results import GuardLog, StageInfo, slo_outcomes, stage_row, stage_warnings, summary_slo
from loadgen.slo.limits import LIMIT_SETS, LimitKey, judge, parse_limit_key, stage_limits
from loadgen.slo.objectives import Objectives
from loadgen.stats.records import RequestResult
from loadgen.stats.stage_stats import Collector, StageStats

CLIENT = {"cpu_percent": 10.0, "loop_lag_p99_s": 0.001}


# --- keys ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("key, metric, pct", [
    ("ttft_p99_s", "ttft", 99.0), ("slo.tpot_p90_s", "tpot", 90.0), ("itl_p999_s", "itl", 99.9),
    ("e2e_p50_s", "e2e", 50.0), ("tpot_p995_s", "tpot", 99.5), ("ttft_p9999_s", "ttft", 99.99),
    ("itl_p5_s", "itl", 5.0),
])  # fmt: skip
def test_the_key_names_the_metric_and_the_percentile(key, metric, pct):
    assert parse_limit_key(key) == LimitKey(metric, pct)
    assert parse_limit_key(key).q == pytest.approx(pct / 100)


@pytest.mark.parametrize("leaf, words", [
    ("ttft_p100_s", "ambiguous"), ("ttft_p990_s", "write p99"), ("ttft_p0_s", "above 0"),
    ("ttfb_p99_s", "use one of ttft, tpot, itl, e2e"), ("ttft_p99.9_s", "p999 for 99.9"),
])  # fmt: skip
def test_a_bad_limit_key_is_named_with_its_fix(leaf, words):
    with pytest.raises(ConfigError) as e:
        build_scenario({"slo": {leaf: 1}})
    assert e.value.key == f"slo.{leaf}" and words in str(e.value)


def test_limits_from_file_options_and_preset_round_trip():
    s = build_scenario({"slo": {"preset": "mlperf-llama2-70b", "ttft_p99_s": 1.5, "itl_p999_s": 0.3}},
                       {"slo.e2e_p50_s": 20, "slo.tpot_p99_s": None})  # null drops the preset's TPOT
    assert s.slo.limits == (("ttft_p99_s", 1.5), ("itl_p999_s", 0.3), ("e2e_p50_s", 20.0))
    assert s.slo.enabled and s.slo.thresholds == {}
    d = s.to_dict()
    assert d["slo"]["ttft_p99_s"] == 1.5 and "limits" not in d["slo"]
    assert build_scenario(d) == s
    with pytest.raises(ConfigError, match="must be > 0"):
        build_scenario({"slo": {"ttft_p99_s": 0}})
    with pytest.raises(ConfigError, match="not a known limit set"):
        build_scenario({"slo": {"preset": "mlperf-gpt5"}})
    # a search needs an objective: a percentile limit is one
    assert build_scenario({"slo": {"tpot_p90_s": 0.045, "search": True}}).slo.search


def test_mlperf_presets_are_the_published_server_limits():
    # MLPerf Inference loadgen/mlperf.conf: <model>.Server.ttft_latency / tpot_latency (ms), p99
    assert LIMIT_SETS["mlperf-llama2-70b"] == {"ttft_p99_s": 2.0, "tpot_p99_s": 0.2}
    assert LIMIT_SETS["mlperf-llama2-70b-interactive"] == {"ttft_p99_s": 0.45, "tpot_p99_s": 0.04}
    assert LIMIT_SETS["mlperf-llama3.1-405b"] == {"ttft_p99_s": 6.0, "tpot_p99_s": 0.175}
    s = build_scenario({"slo": {"preset": "mlperf-llama3.1-8b-interactive"}})
    assert s.slo.limits == (("ttft_p99_s", 0.5), ("tpot_p99_s", 0.03))


# --- the verdict ----------------------------------------------------------------------------------


def _stats(ttft: list[float]) -> StageStats:
    s = StageStats()
    s.ttft_s.add_many(ttft)
    return s


def test_at_the_boundary_equal_passes_and_just_above_fails():
    # 99 samples at 0.5 s and one at 3 s: p99 is the 99th sample (rank ceil(0.99 x 100)), reported
    # as its bucket's middle clamped to the exact [min, max]: 0.5 s exactly
    s = _stats([0.5] * 99 + [3.0])
    at, below = judge(s, [("ttft_p99_s", 0.5), ("ttft_p99_s", 0.499)])
    assert (at.measured_s, at.passed, below.passed) == (0.5, True, False)
    # p99.9 is the 100th sample, 3 s, reported as its bucket's middle: within 1.16 % below it
    (worst,) = judge(s, [("ttft_p999_s", 3.0)])
    assert 3.0 / 10**0.005 <= worst.measured_s < 3.0 and worst.passed and worst.samples == 100
    m = worst.measured_s
    at, below = judge(s, [("ttft_p999_s", m), ("ttft_p999_s", m * (1 - 1e-9))])
    assert at.passed and not below.passed


def test_the_measured_quantile_is_within_the_histograms_error_of_the_exact_one():
    rng = np.random.default_rng(7)
    values = rng.lognormal(-1, 0.8, 5000)
    s = _stats(list(values))
    bound = 10**0.005 - 1  # one bucket's half-width, in ratio (loadgen.stats.hist)
    for pct in (50, 90, 99, 99.9):
        exact = float(np.sort(values)[math.ceil(pct / 100 * len(values)) - 1])
        (v,) = judge(s, [(f"ttft_p{str(pct).replace('.', '')}_s", 1.0)])
        assert abs(v.measured_s / exact - 1) <= bound + 1e-12, pct


def test_the_verdict_on_merged_histograms_equals_the_verdict_on_one():
    rng = np.random.default_rng(3)
    parts = [list(rng.lognormal(-2, 1, n)) for n in (10, 300, 57)]
    merged = StageStats()
    for p in parts:
        merged.merge(StageStats.from_message(_stats(p).to_message()))  # as a master merges worker reports
    whole = _stats([v for p in parts for v in p])
    limits = [("ttft_p50_s", 0.15), ("ttft_p99_s", 1.0), ("ttft_p90_s", 0.4)]
    assert judge(merged, limits) == judge(whole, limits)


def test_no_sample_passes_and_each_metric_reads_its_own_histogram():
    s = StageStats()
    s.tpot_s.add(0.02)
    s.itl_token_s.add_many([0.01] * 9 + [0.5])
    s.e2e_s.add(4.0)
    v = {x.key: x for x in judge(s, [("ttft_p99_s", 1), ("tpot_p50_s", 0.019), ("itl_p90_s", 0.0101),
                                     ("itl_p95_s", 0.02), ("e2e_p50_s", 4.0)])}
    assert v["ttft_p99_s"].measured_s is None and v["ttft_p99_s"].passed  # no sample: nothing to violate
    assert not v["tpot_p50_s"].passed and v["itl_p90_s"].passed and not v["itl_p95_s"].passed
    assert v["e2e_p50_s"].passed


def test_stage_limits_says_what_failed_and_a_stage_passes_only_if_all_hold():
    s = _stats([0.1] * 95 + [2.0] * 5)
    ok = {"attainment": 1.0, "pass": True}
    row = stage_limits(ok, s, [("ttft_p90_s", 0.2), ("ttft_p99_s", 1.0)])
    assert row["pass"] is False and row["failed"] == ["ttft_p99_s"]
    assert row["limits"]["ttft_p90_s"] == {"measured_s": 0.1, "limit_s": 0.2, "pass": True, "samples": 100}
    row = stage_limits({"attainment": 0.5, "pass": False}, s, [("ttft_p90_s", 0.2)])
    assert row["pass"] is False and row["failed"] == ["attainment"]
    assert stage_limits(ok, s, [("ttft_p90_s", 0.2)])["pass"] is True


# --- the stage row, the search's outcomes and the answer -------------------------------------------


def _result(ok: bool, ttft: float | None) -> RequestResult:
    empty = np.empty(0)
    return RequestResult(ok, None if ok else OVERLOAD_503, "", 10, 20, False, ttft, 1.0, 0.05, 20.0,
                         empty, empty.astype(int), empty, "length" if ok else None, 20)


def _row(obj: Objectives, ttfts: list[float], failed: int = 0, c: int = 8) -> dict:
    col = Collector()
    for t in ttfts:
        col.record_result(_result(True, t), 0, 10, 20, obj)
    for _ in range(failed):
        col.record_result(_result(False, None), 0, 10, 20, obj)
    col.add_window_tokens(0, 400)
    return stage_row(StageInfo(0, c, window_s=4.0, users=c), col.stages[0], GuardLog(), CLIENT, False,
                     objectives=obj)


def test_percentile_limits_alone_judge_the_row_and_failed_requests_count_through_the_attainment():
    obj = Objectives(attainment=0.99, limits=(("ttft_p90_s", 0.5),))
    passing = _row(obj, [0.1] * 99 + [0.9])
    assert passing["slo"]["pass"] and passing["slo"]["attainment"] == 1.0 and passing["flags"] == []
    assert passing["slo"]["limits"]["ttft_p90_s"]["pass"] and passing["slo"]["failed"] == []
    slow = _row(obj, [0.1] * 80 + [0.9] * 20)
    assert slow["flags"] == ["slo_fail"] and slow["slo"]["failed"] == ["ttft_p90_s"]
    warning = stage_warnings(slow, 10, 20)[-1]
    assert "failed the SLO: TTFT p90 900 ms > 500 ms (ttft_p90_s)" in warning
    # fast, but 2 of 100 requests failed: the histograms hold ok requests only; the attainment
    # (the share that succeeded, with no per-request objective) is 98 % < 99 %
    lossy = _row(obj, [0.1] * 98, failed=2)
    assert lossy["slo"]["limits"]["ttft_p90_s"]["pass"] and lossy["slo"]["failed"] == ["attainment"]
    assert not lossy["slo"]["pass"]


def test_the_search_reads_the_combined_verdict_and_the_answer_names_the_limits():
    obj = Objectives(tpot_s=1.0, attainment=0.9, search=True, limits=(("ttft_p99_s", 0.5),))
    rows = [_row(obj, [0.1] * 10, c=8), _row(obj, [0.1] * 9 + [0.9], c=16)]
    assert rows[1]["slo"]["attainment"] == 1.0  # every request met tpot_s: only the limit failed
    assert slo_outcomes(rows) == [(8, True), (16, False)]
    sc = build_scenario({"slo": {"tpot_s": 1.0, "attainment": 0.9, "search": True, "ttft_p99_s": 0.5}})
    answer = summary_slo(rows, sc.slo)
    assert answer["limits"] == {"ttft_p99_s": 0.5} and answer["bracket"] == [8, 16]
    line = slo_line(answer)
    assert line.startswith("SLO: max concurrency C=8 (ttft_p99_s <= 0.5, tpot_s <= 1 for 90% of requests held")
    only = dict(answer, objectives={}, bracket=[None, 8])
    assert slo_line(only).startswith("SLO: no stage met ttft_p99_s <= 0.5, 90% of requests ok (max")
