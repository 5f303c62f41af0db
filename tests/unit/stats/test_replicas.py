"""Per-replica rows (loadgen.stats.replicas, Collector.replicas): they sum exactly to the stage, merge
exactly across processes, and the skew and flags follow their formulas; the fleet's capacity and
the guard's share check (loadgen.server.replicas, loadgen.run.kv_guard)."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.errors import STREAM_ERROR
from loadgen.run.kv_guard import decide, decide_spread, spread_ceiling
from loadgen.server.replicas import ReplicaCapacity, summed_capacity
from loadgen.server.replies import Capacity
from loadgen.stats.replicas import judge, replica_rows
from loadgen.stats.stage_stats import Collector
from loadgen.workload.mix import KvMix
from tests.support.request_results import failed_result, ok_result

NAMES = ("a:1", "b:1", "c:1")


def _fill(collector: Collector, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for i in range(60):
        name = NAMES[i % 3] if i % 7 else "unattributed"
        ok = bool(rng.random() > 0.1)
        result = ok_result(rng) if ok else failed_result(STREAM_ERROR)
        collector.record_result(result, 0, 100, 10, replica=name)
        collector.add_window_tokens(0, 10, replica=name)
        if ok:
            collector.add_window_request(0, replica=name)


def test_rows_sum_exactly_to_the_stage_and_merge_exactly():
    local, workers, master = Collector(), [Collector(), Collector()], Collector()
    for seed, worker in enumerate(workers):
        _fill(local, seed)
        _fill(worker, seed)
        master.merge_delta(worker.take_delta())
    assert master.replicas == local.replicas and master.stages == local.stages
    stage = master.stages[0].row(2.0)
    rows = replica_rows(NAMES, master.replicas[0], 2.0)
    assert list(rows) == [*NAMES, "unattributed"]
    for key in ("requests", "error_count", "input_tokens", "output_tokens"):
        assert sum(r[key] for r in rows.values()) == stage[key], key
    assert sum(r["output_tokens_per_s"] for r in rows.values()) == pytest.approx(stage["output_tokens_per_s"])


def test_a_replica_that_served_nothing_has_a_zero_row_and_servers_join():
    rows = replica_rows(NAMES, {}, 1.0, {"a:1": 2000}, {"b:1": {"kv_usage_mean": 0.5}})
    assert [r["requests"] for r in rows.values()] == [0, 0, 0]
    assert rows["a:1"]["kv_capacity_tokens"] == 2000 and rows["b:1"]["server"] == {"kv_usage_mean": 0.5}
    assert replica_rows(NAMES, None, 1.0, {"a:1": 1})["a:1"] == {"source": "engine", "kv_capacity_tokens": 1}
    assert judge(replica_rows(NAMES, None, 1.0), NAMES, 1.5, 2.0) == (None, [])


def test_behind_a_router_that_names_no_engine_the_rows_are_the_engines_own():
    def server(count, itl_p50):
        return {"e2e": {"count": count}, "ttft": {"p50_s": 0.02, "p99_s": 0.05}, "itl": {"p50_s": itl_p50},
                "output_tokens": count * 40, "output_tokens_per_s": count * 20.0, "kv_usage_mean": 0.3}

    servers = {"a:1": server(40, 0.005), "b:1": server(10, 0.02), "c:1": server(40, 0.005)}
    rows = replica_rows(NAMES, None, 2.0, None, servers)
    assert rows["b:1"]["source"] == "engine" and rows["b:1"]["requests"] == 10 and rows["b:1"]["tpot_p50_s"] == 0.02
    assert rows["a:1"]["server"]["kv_usage_mean"] == 0.3
    skew, flags = judge(rows, NAMES, 1.5, 2.0)
    assert skew == 40 / 30 and flags == ["replica_slow", "replica_skew"] and rows["b:1"]["flags"] == ["under_share", "slow"]


def test_skew_is_max_over_mean_and_share_flags_use_the_ratio():
    rows = {n: {"requests": r, "ttft_p50_s": 0.1, "tpot_p50_s": 0.01} for n, r in zip(NAMES, (60, 30, 30), strict=True)}
    rows["unattributed"] = {"requests": 500}  # not a replica: not judged
    skew, flags = judge(rows, NAMES, 1.5, 2.0)
    assert skew == 60 / 40 and flags == []  # 1.5 is not above 1.5
    assert [rows[n]["load_ratio"] for n in NAMES] == [1.5, 0.75, 0.75] and "load_ratio" not in rows["unattributed"]
    rows["a:1"]["requests"] = 61
    skew, flags = judge(rows, NAMES, 1.5, 2.0)
    assert flags == ["replica_skew"] and rows["a:1"]["flags"] == ["over_share"]
    rows = {n: {"requests": r} for n, r in zip(NAMES, (40, 40, 10), strict=True)}
    assert judge(rows, NAMES, 1.5, 2.0)[1] == ["replica_skew"] and rows["c:1"]["flags"] == ["under_share"]


def test_slow_is_p50_against_the_others_median():
    rows = {n: {"requests": 10, "ttft_p50_s": 0.1, "tpot_p50_s": t} for n, t in zip(NAMES, (0.01, 0.03, 0.012), strict=True)}
    assert judge(rows, NAMES, 1.5, 2.0)[1] == ["replica_slow"]
    assert [rows[n]["flags"] for n in NAMES] == [[], ["slow"], []]  # 0.03 > 2 x median(0.01, 0.012)
    rows["b:1"]["tpot_p50_s"] = 0.022  # 2 x 0.011 = 0.022: not above
    assert judge(rows, NAMES, 1.5, 2.0)[1] == []


def _cap(tokens, flavor="vllm", max_len=4096):
    return Capacity(tokens, None if tokens is None else "vllm_cache_config", flavor, max_len, "d")


def test_fleet_capacity_is_the_sum_known_only_when_every_replica_is():
    caps = (ReplicaCapacity("a:1", _cap(2000)), ReplicaCapacity("b:1", _cap(2000, max_len=2048)),
            ReplicaCapacity("c:1", _cap(1000)))
    fleet = summed_capacity(caps)
    assert (fleet.tokens, fleet.source, fleet.flavor, fleet.max_model_len) == (5000, "replicas", "vllm", 2048)
    assert fleet.detail == "5,000 tokens = a:1 2,000 + b:1 2,000 + c:1 1,000"
    unknown = summed_capacity((*caps[:2], ReplicaCapacity("c:1", _cap(None))))
    assert unknown.tokens is None and "no figure from c:1" in unknown.detail
    assert summed_capacity(caps, configured=9000).tokens == 9000


def test_guard_checks_each_spread_replicas_share_against_its_own_capacity():
    caps = (("a:1", 2400), ("b:1", 2400), ("c:1", 1200))  # 120 tokens a request: 20, 20, 10 fit
    ok = decide_spread(24, caps, 80, 40, 0.0, "abort")  # 8 a replica: 960 <= 1200
    assert ok.allowed and not ok.breach and ok.capacity_tokens == 6000
    refused = decide_spread(40, caps, 80, 40, 0.0, "abort")  # 14 a replica: 1680 > c's 1200
    assert not refused.allowed and "replica c:1's capacity 1,200" in refused.message
    assert "lower stages.max to 30" in refused.message  # 3 x c's 10
    assert decide_spread(40, caps, 80, 40, 0.0, "clamp").run_concurrency == 30
    assert spread_ceiling(caps, KvMix(80, 40, 0.0, 120), 0.0) == 30
    # a router: the fleet's sum, whatever the replicas' sizes
    assert decide(40, 6000, 80, 40, 0.0, "abort").allowed and not decide(51, 6000, 80, 40, 0.0, "abort").allowed


def test_a_routers_list_of_workers():
    from loadgen.server.replicas import workers_listed

    assert workers_listed({"urls": ["http://127.0.0.1:8001", "http://e:8000", 5, "e:1"]}) == (
        "http://127.0.0.1:8001", "http://e:8000")
    assert workers_listed({"workers": [{"url": "http://e:8000", "is_healthy": True}, {"id": "x"}], "total": 2}) == (
        "http://e:8000",)  # sglang-router 0.3's GET /workers
    assert workers_listed({"workers": []}) == () and workers_listed("nginx") == () and workers_listed(None) == ()
