"""StageStats and Collector: counting rules, row fields, and exact merging of worker deltas."""

from __future__ import annotations

import json

import msgpack
import numpy as np
import orjson
import pytest

from loadgen.errors import OVERLOAD_429, READ_TIMEOUT, STREAM_ERROR
from loadgen.slo.objectives import Objectives, stage_slo
from loadgen.stats.records import RequestRecord
from loadgen.stats.stage_stats import COUNTERS, HISTOGRAMS, Collector, StageStats
from tests.support.request_results import failed_result, ok_result

OBJ = Objectives(ttft_s=0.4, tpot_s=0.02)  # ok_result: TTFT ~ lognormal(-1, 0.5), so some miss


def test_add_result_counting_rules():
    rng = np.random.default_rng(0)
    s = StageStats()
    s.add_result(ok_result(rng, prompt=100, completion=50), 100, 50)
    s.add_result(ok_result(rng, prompt=101, completion=49), 100, 50)  # both mismatch
    s.add_result(ok_result(rng, completion=30, estimated=True), 100, 50)  # estimated, no verdict
    s.add_result(failed_result(STREAM_ERROR, tokens=7), 100, 50)
    s.add_result(failed_result(OVERLOAD_429, tokens=0), 100, 50)
    assert s.requests_ok == 3 and s.errors == {STREAM_ERROR: 1, OVERLOAD_429: 1} and s.error_count == 2
    assert s.input_tokens == 100 + 101 + 100 and s.output_tokens == 50 + 49 + 30
    assert s.failed_output_tokens == 7
    assert (s.mismatch_input, s.mismatch_output, s.tokens_estimated) == (1, 1, 1)
    assert s.ttft_s.count == 3 and s.e2e_s.count == 3 and s.tpot_s.count == 3 and s.decode_tps.count == 3


def test_itl_histograms_weighted_per_token_and_per_chunk():
    rec = RequestRecord(0.0, 200, "/v1/chat/completions")
    total = 0
    for i in range(50):  # 4 tokens per chunk every 80 ms, per-chunk usage
        total += 4
        chunk = {"choices": [{"delta": {"content": "abcd"}, "finish_reason": None}],
                 "usage": {"prompt_tokens": 10, "completion_tokens": total}}  # fmt: skip
        rec.on_payload(orjson.dumps(chunk), 0.2 + 0.08 * i)
    rec.on_payload(b"[DONE]", 5.0)
    s = StageStats()
    s.add_result(rec.finish(5.0, eof=True), 10, 200)
    assert s.itl_token_s.count == 49 * 4 and s.itl_chunk_s.count == 49
    row = s.row(10.0)
    assert row["itl_p50_s"] == pytest.approx(0.02, rel=0.012)
    assert row["itl_chunk_p50_s"] == pytest.approx(0.08, rel=0.012)
    assert row["itl_chunk_p90_s"] == row["itl_chunk_p99_s"] == pytest.approx(0.08, rel=0.012)
    assert row["ttft_p50_s"] == pytest.approx(0.2, rel=0.012)
    assert row["token_mismatch"] == {"input": 0, "output": 0, "estimated": 0}


def test_row_fields_and_window_rate():
    rng = np.random.default_rng(1)
    c = Collector()
    for _ in range(20):
        c.record_result(ok_result(rng, completion=64), 0, 100, 64)
    c.record_result(failed_result(READ_TIMEOUT), 0, 100, 64)
    c.add_window_tokens(0, 1000)
    c.add_window_tokens(None, 55)
    row = c.stages[0].row(20.0)
    assert set(row) == {
        "requests", "errors", "error_count", "input_tokens", "output_tokens", "output_tokens_per_s",
        "decode_tps_p50", "ttft_p50_s", "ttft_p90_s", "ttft_p95_s", "ttft_p99_s", "itl_p50_s", "itl_p90_s",
        "itl_p95_s", "itl_p99_s",
        "itl_chunk_p50_s", "itl_chunk_p90_s", "itl_chunk_p99_s", "tpot_p50_s", "e2e_p50_s", "e2e_p99_s",
        "token_mismatch", "textless_requests",
        "achieved_rate_per_s",
        "lateness_p99_s", "failures", "input_len_p50_tokens", "input_len_p99_tokens", "output_len_p50_tokens",
        "output_len_p99_tokens", "length_hist", "slo_attainment", "goodput_requests_per_s",
        "goodput_output_tokens_per_s", "ttfat_p50_s", "ttfat_p90_s", "ttfat_p99_s",
        "reasoning_tokens_per_request", "answer_decode_tps_p50", "tokens_per_chunk", "cached_share",
        "cached_prompt_tokens", "output_tokens_per_gpu_per_s", "total_tokens_per_gpu_per_s",
        "usd_per_million_output_tokens", "usd_per_million_total_tokens",
        "joules_per_output_token", "kwh_per_million_output_tokens",
    }  # fmt: skip
    # a plain model: no reasoning figure, no cache figure without the server's detail (None, not 0)
    assert row["ttfat_p50_s"] is None and row["reasoning_tokens_per_request"] is None
    assert row["cached_share"] is None and row["cached_prompt_tokens"] is None
    # no objective set: no SLO figure (None, not a misleading 0); cost figures come from stage_row
    assert row["slo_attainment"] is None and row["goodput_requests_per_s"] is None
    assert row["output_tokens_per_gpu_per_s"] is None and row["usd_per_million_output_tokens"] is None
    hist = row["length_hist"]
    assert hist["edges"][:3] == [1.0, 1.258925, 1.584893] and hist["edges"][-1] >= 100
    assert sum(hist["input"]) == sum(hist["output"]) == 20
    assert hist["input"][20] == 20 and hist["output"][19] == 20  # 100 in (79.4, 100]; 64 in (63.1, 79.4]
    assert row["output_len_p50_tokens"] == pytest.approx(64, rel=0.012)
    assert row["requests"] == 20 and row["errors"] == {READ_TIMEOUT: 1} and row["error_count"] == 1
    assert row["failures"] == {READ_TIMEOUT: [{"status": None, "message": "x", "requests": 1}]}
    assert row["output_tokens"] == 20 * 64 and row["output_tokens_per_s"] == 50.0
    assert row["ttft_p50_s"] <= row["ttft_p90_s"] <= row["ttft_p95_s"] <= row["ttft_p99_s"]
    assert row["itl_p90_s"] <= row["itl_p95_s"] <= row["itl_p99_s"]
    assert c.totals.window_output_tokens == 1055
    json.dumps(row)  # plain JSON
    empty = StageStats().row(0.0)
    assert empty["output_tokens_per_s"] is None and empty["ttft_p50_s"] is None and empty["requests"] == 0


def test_measured_vs_unmeasured_and_inflight():
    rng = np.random.default_rng(2)
    c = Collector()
    c.request_started(None)
    c.request_started(3)
    c.request_started(3)
    c.request_finished(3)
    assert c.inflight == {None: 1, 3: 1}
    c.record_result(ok_result(rng), None, 100, None)
    c.record_result(ok_result(rng), 3, 100, None)
    assert c.totals.requests_ok == 2 and set(c.stages) == {3} and c.stages[3].requests_ok == 1


def feed(collector, rng, n):
    """n random request events into one collector; return them to replay elsewhere."""
    events = []
    for _ in range(n):
        stage = [None, 0, 1, 2][int(rng.integers(4))]
        r = rng.random()
        if r < 0.1:
            kind = [STREAM_ERROR, OVERLOAD_429, READ_TIMEOUT][int(rng.integers(3))]
            res = failed_result(kind, int(rng.integers(0, 9)))
        else:
            res = ok_result(rng, estimated=r > 0.9)
        events.append(("result", res, stage))
        events.append(("tokens", int(rng.integers(1, 50)), stage))
    for kind, x, stage in events:
        if kind == "result":
            collector.request_started(stage)
            collector.request_finished(stage)
            collector.record_result(x, stage, 100, 64, OBJ)
        else:
            collector.add_window_tokens(stage, x)
    return events


def assert_same(a: Collector, b: Collector):
    assert a.totals == b.totals
    assert set(a.stages) == set(b.stages)
    for k in a.stages:
        assert a.stages[k] == b.stages[k], k
        for name in HISTOGRAMS:  # bucket for bucket, not only approximately
            assert np.array_equal(getattr(a.stages[k], name).counts, getattr(b.stages[k], name).counts)


@pytest.mark.parametrize("codec", ["msgpack", "json"])
def test_merged_worker_deltas_equal_one_collector_that_saw_everything(codec):
    rng = np.random.default_rng(3)
    workers = [Collector() for _ in range(3)]
    reference, master = Collector(), Collector()
    previous = {n: 0 for n in COUNTERS}
    for _round in range(4):
        for w in workers:
            for kind, x, stage in feed(w, rng, int(rng.integers(0, 30))):
                if kind == "result":
                    reference.record_result(x, stage, 100, 64, OBJ)
                else:
                    reference.add_window_tokens(stage, x)
            delta = w.take_delta()
            if codec == "json":
                delta = json.loads(json.dumps(delta))
            else:
                delta = msgpack.loads(msgpack.dumps(delta), raw=False, strict_map_key=False)
            master.merge_delta(delta)
            for n in COUNTERS:  # master totals never go backwards
                assert getattr(master.totals, n) >= previous[n]
                previous[n] = getattr(master.totals, n)
    assert_same(master, reference)
    assert master.totals.requests_ok > 0 and len(master.stages) == 3
    assert master.stages[1].row(10.0) == reference.stages[1].row(10.0)
    slo = master.totals.slo  # SLO counts merge exactly too, and some requests missed
    assert slo == reference.totals.slo and 0 < slo.met < slo.judged
    assert slo.judged == master.totals.requests_ok + master.totals.error_count


def test_take_delta_resets_and_second_delta_is_empty():
    rng = np.random.default_rng(4)
    c = Collector()
    c.request_started(1)
    c.record_result(ok_result(rng), 1, 100, 64)
    c.add_window_tokens(1, 10)
    first = c.take_delta()
    assert first["totals"]["c"]["requests_ok"] == 1 and first["stages"][0][0] == 1
    assert c.totals.requests_ok == 0 and c.stages == {}
    assert c.inflight == {1: 1}  # in-flight is absolute, not part of the delta
    second = c.take_delta()
    assert second == {"totals": {"c": {}, "e": {}, "h": {}}, "stages": []}
    c.request_finished(1)
    assert c.inflight == {1: 0}
    master = Collector()
    for d in (first, second, c.take_delta()):
        master.merge_delta(d)
    assert master.totals.requests_ok == 1 and master.stages[1].window_output_tokens == 10


def test_stage_stats_wire_round_trip_json():
    rng = np.random.default_rng(5)
    s = StageStats()
    for _ in range(30):
        s.add_result(ok_result(rng), 100, 64)
    s.add_result(failed_result(STREAM_ERROR), 100, 64)
    s.window_output_tokens = 123
    back = StageStats.from_message(json.loads(json.dumps(s.to_message())))
    assert back == s and back.row(2.0) == s.row(2.0)
    with pytest.raises(ValueError):
        StageStats.from_message({"c": {"bogus": 1}})


def test_merge_is_addition():
    rng = np.random.default_rng(6)
    a, b, both = StageStats(), StageStats(), StageStats()
    for i in range(40):
        r = ok_result(rng) if i % 7 else failed_result(STREAM_ERROR)
        (a if i % 2 else b).add_result(r, 100, 64)
        both.add_result(r, 100, 64)
    a.merge(b)
    assert a == both


def test_one_token_per_chunk_shares_binning_and_totals_match_stage():
    rec = RequestRecord(0.0, 100, "/v1/completions")
    for i in range(100):
        rec.on_payload(
            orjson.dumps({"choices": [{"text": "t", "finish_reason": None}]}), 0.1 + 0.01 * i + 1e-4 * (i % 7)
        )
    rec.on_payload(
        orjson.dumps({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 100}}), 1.2
    )
    rec.on_payload(b"[DONE]", 1.2)
    result = rec.finish(1.2, eof=True)
    assert result.ok and result.itl_token_s is result.itl_chunk_s
    c = Collector()
    c.record_result(result, 0, 5, 100)
    stage = c.stages[0]
    assert stage == c.totals
    assert stage.itl_token_s.count == stage.itl_chunk_s.count == 99
    assert np.array_equal(stage.itl_token_s.counts, stage.itl_chunk_s.counts)
    alone = StageStats()
    alone.add_result(result, 5, 100)
    assert alone == stage


def test_slo_verdict_counted_once_in_totals_and_stage_and_the_metric_table_agrees():
    rng = np.random.default_rng(6)
    c = Collector()
    results = [ok_result(rng, completion=40) for _ in range(40)] + [failed_result(READ_TIMEOUT)]
    for r in results:
        c.record_result(r, 2, 100, 40, OBJ)
    c.record_result(ok_result(rng, completion=40), None, 100, 40, OBJ)  # unmeasured: totals only
    c.add_window_tokens(2, 1600)  # 200 tok/s over the 8 s window
    st = c.stages[2]
    met = sum(r.ok and r.ttft_s <= 0.4 and r.tpot_s <= 0.02 for r in results)
    assert 0 < met < len(results) - 1
    assert (st.slo.met, st.slo.judged, st.slo.met_output_tokens) == (met, 41, 40 * met)
    assert c.totals.slo.judged == 42
    row = st.row(8.0)
    measured = st.output_tokens + st.failed_output_tokens
    assert measured == 40 * 40 + 3
    answer = stage_slo(st.slo, st.requests_ok + st.error_count, OBJ, row["output_tokens_per_s"], measured)
    assert row["slo_attainment"] == answer["attainment"] == met / 41
    assert row["goodput_requests_per_s"] == answer["goodput_requests_per_s"] == pytest.approx(200 * met / measured)
    assert row["goodput_output_tokens_per_s"] == answer["goodput_output_tokens_per_s"] \
        == pytest.approx(200 * 40 * met / measured)
    back = StageStats.from_message(json.loads(json.dumps(st.to_message())))
    assert back == st and back.slo == st.slo
    plain = Collector()  # objectives without a threshold: no accounting at all
    plain.record_result(results[0], 0, 100, 40, Objectives())
    assert plain.stages[0].slo.judged == 0 and "s" not in plain.stages[0].to_message()


def test_open_loop_counters_merge_and_peak_merges_by_max():
    """Lateness and drops count per arrival; the in-flight peak merges by max (a maximum over
    time of one process), everything else adds; a stage with only arrivals still ships."""
    a, b = Collector(), Collector()
    a.request_scheduled(0, 0.002)
    a.request_scheduled(0, None)
    a.add_window_request(0)
    a.stages[0].inflight_peak, a.stages[0].inflight_us = 7, 1_000_000
    b.request_scheduled(0, 0.004)
    b.stages[0].inflight_peak, b.stages[0].inflight_us = 3, 500_000
    master = Collector()
    for c in (a, b):
        master.merge_delta(c.take_delta())
    s = master.stages[0]
    assert (s.scheduled_requests, s.dropped_by_client, s.window_requests) == (3, 1, 1)
    assert s.schedule_lateness_s.count == 2 and s.inflight_us == 1_500_000 and s.inflight_peak == 7
    assert master.totals.scheduled_requests == 3
    row = s.row(2.0)
    assert row["achieved_rate_per_s"] == 0.5
    assert row["lateness_p99_s"] == pytest.approx(0.004, rel=0.03)


# counted per stage only, not per model: in flight (a concurrency) and open-loop scheduling (a model
# is drawn when a request is sent, after its arrival was scheduled or dropped)
STAGE_ONLY = {"scheduled_requests", "dropped_by_client", "inflight_us", "inflight_peak"}


@pytest.mark.parametrize("codec", ["msgpack", "json"])
def test_per_model_stats_sum_to_the_stage_and_merge_exactly(codec):
    """A mix of models: each model's StageStats of a stage, counted by the same code, add up to the
    stage's; three workers' deltas merge into exactly what one collector that saw everything holds."""
    rng = np.random.default_rng(11)
    names = ("base", "lora")
    reference, master = Collector(), Collector()
    for _ in range(3):  # workers
        w = Collector()
        for _ in range(int(rng.integers(20, 60))):
            stage, model = [None, 0, 1][int(rng.integers(3))], names[int(rng.integers(2))]
            res = failed_result(OVERLOAD_429, 2) if rng.random() < 0.1 else ok_result(rng)
            tokens = int(rng.integers(1, 50))
            for c in (w, reference):
                c.record_result(res, stage, 100, 64, OBJ, model=model)
                c.add_window_tokens(stage, tokens, model)
                if res.ok:
                    c.add_window_request(stage, model)
            if rng.random() < 0.05:
                for c in (w, reference):
                    c.record_cancelled(stage, 3, model)
        delta = w.take_delta()
        assert w.models == {}
        delta = (json.loads(json.dumps(delta)) if codec == "json"
                 else msgpack.loads(msgpack.dumps(delta), raw=False, strict_map_key=False))
        master.merge_delta(delta)
    assert_same(master, reference)
    assert set(master.models) == {0, 1} and master.models == reference.models
    for k, by_name in master.models.items():
        stage = master.stages[k]
        assert set(by_name) == set(names)
        for n in set(COUNTERS) - STAGE_ONLY:  # every request counter of the stage is the sum of its models'
            assert sum(getattr(s, n) for s in by_name.values()) == getattr(stage, n), n
        assert sum(s.error_count for s in by_name.values()) == stage.error_count
        for name in HISTOGRAMS:  # bucket for bucket
            assert np.array_equal(sum(getattr(s, name).counts for s in by_name.values()), getattr(stage, name).counts)
        rows = [s.model_row(10.0) for s in by_name.values()]
        assert sum(r["requests"] for r in rows) == stage.row(10.0)["requests"]
        assert sum(r["output_tokens_per_s"] for r in rows) == pytest.approx(stage.row(10.0)["output_tokens_per_s"])


def test_one_model_keeps_no_per_model_stats():
    rng = np.random.default_rng(12)
    c = Collector()
    c.record_result(ok_result(rng), 0, 100, 64)
    c.add_window_tokens(0, 5)
    c.add_window_request(0)
    assert c.models == {} and "models" not in c.take_delta()
