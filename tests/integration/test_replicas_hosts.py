"""The same three simulator replicas listed by --host three times (the client spreads the load): each
replica's start check, the guard's capacity the sum of the three and each replica's share checked
against its own (the sweep stops at the fleet's ceiling, where the small replica is full: 3 x 10),
per-replica rows that sum exactly to each stage, the slow replica flagged; over two worker
processes the master's per-replica rows are exactly the workers' shipped statistics merged."""

from __future__ import annotations

import json

import pytest

from loadgen.errors import EXIT_CONFIG, EXIT_GUARD_ABORT, EXIT_SERVER_UNUSABLE
from tests.support.ports import free_port
from tests.support.replicas import (
    CAPACITY,
    LOAD,
    assert_rows_sum_to_stage,
    assert_slow_flagged,
    merged_from_ledgers,
    name_of,
    three_replicas,
)
from tests.support.runlocust import run_locust

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def sims():
    with three_replicas() as started:
        yield started


def _hosts(sims) -> list[str]:
    return [x for s in list(sims.values())[1:] for x in ("--host", s.url)]  # the first is run_locust's --host


def test_hosts_spread_round_robin_guard_per_replica_rows_and_slow_flag(sims, tmp_path):
    first = next(iter(sims.values())).url
    run = run_locust(first, tmp_path / "r", *LOAD, *_hosts(sims), "--stages", "8,24,40", "--requests-jsonl",
                     timeout_s=120)
    assert run.code == EXIT_GUARD_ABORT, run.stderr[-3000:]
    summary = run.summary
    names = {role: name_of(s) for role, s in sims.items()}
    assert summary["replicas"]["layout"] == "client" and summary["replicas"]["policy"] == "round_robin"
    assert summary["replicas"]["capacity_tokens"] == {names[r]: CAPACITY[r] for r in names}
    guard = summary["guard"]
    # capacity: the sum; ceiling: 3 x the small replica's 10 (40 = 14 a replica, 1,680 tokens > 1,200)
    assert (guard["capacity_tokens"], guard["max_concurrency"], guard["stopped_before"]) == (6000, 30, 40)
    assert [s["concurrency"] for s in summary["stages"]] == [8, 24]
    assert f"exceed replica {names['small']}'s capacity 1,200 (fleet capacity 6,000)" in run.stderr
    for stage in summary["stages"]:
        assert list(stage["replicas"]) == list(names.values())
        assert_rows_sum_to_stage(stage)
        assert_slow_flagged(stage, sims)
        # round robin: each process sends replica n mod 3 its n-th request, so the counts differ by at most 1
        counts = [r["requests"] + r["error_count"] for r in stage["replicas"].values()]
        assert max(counts) - min(counts) <= 1, counts
        assert "replica_skew" not in stage["flags"]
        print(f"C={stage['concurrency']} skew {stage['replica_skew']:.3f} counts {counts}")
    # requests.jsonl names each request's replica: per stage and replica, as many lines as the row counts
    sent = [json.loads(line) for line in (run.run_dir / "requests.jsonl").read_text().splitlines()]
    for stage in summary["stages"]:
        for name, row in stage["replicas"].items():
            n = sum(1 for r in sent if r["stage"] == stage["index"] and r["replica"] == name)
            assert n == row["requests"] + row["error_count"], (stage["index"], name)


def test_two_processes_merge_per_replica_rows_exactly(sims, tmp_path):
    first = next(iter(sims.values())).url
    results = tmp_path / "r"
    run = run_locust(first, results, *LOAD, *_hosts(sims), "--stages", "8,24", "--replica-policy",
                     "least_inflight", "--processes", "2", timeout_s=150)
    assert run.code == 0, run.stderr[-3000:]
    summary = run.summary
    assert summary["run"]["workers"] == 2 and summary["replicas"]["policy"] == "least_inflight"
    ledgers = [json.loads(p.read_text()) for p in sorted((results / "workers").glob("*.json"))]
    assert len(ledgers) == 2
    for stage in summary["stages"]:
        assert_rows_sum_to_stage(stage)
        for name, row in stage["replicas"].items():
            merged = merged_from_ledgers(ledgers, stage["index"], name).row(stage["window_s"])
            assert {k: merged[k] for k in ("requests", "error_count", "output_tokens", "ttft_p99_s", "itl_p99_s",
                                           "output_tokens_per_s")} == \
                {k: row[k] for k in ("requests", "error_count", "output_tokens", "ttft_p99_s", "itl_p99_s",
                                     "output_tokens_per_s")}, (stage["index"], name)
        # least in flight: the slow replica holds its requests 4 x longer, so it gets fewer
        slow = stage["replicas"][name_of(sims["slow"])]
        assert slow["load_ratio"] < 1, stage["replicas"]


def test_hosts_and_replica_metrics_do_not_mix(sims, tmp_path):
    first = next(iter(sims.values())).url
    run = run_locust(first, tmp_path / "r", *LOAD, *_hosts(sims), "--replica-metrics", first + "/metrics",
                     "--stages", "1", timeout_s=60)
    assert run.code == EXIT_CONFIG, run.stderr[-2000:]
    assert "is for engines behind one router (--host ROUTER), and --host was given 3 times" in run.stderr


def test_a_replica_that_does_not_answer_stops_the_start_check_naming_it(sims, tmp_path):
    first = next(iter(sims.values())).url
    dead = f"http://127.0.0.1:{free_port()}"
    run = run_locust(first, tmp_path / "r", *LOAD, "--host", dead, "--stages", "1", timeout_s=60)
    assert run.code == EXIT_SERVER_UNUSABLE, run.stderr[-2000:]
    assert f"replica {dead.split('//')[1]} ({dead}) failed the start check: GET /v1/models:" in run.stderr
