"""Three simulator replicas behind a real router (nginx, least_conn), each engine named by
--replica-metrics and each response's engine by the router's X-Upstream-Addr header: the guard's
capacity is the sum of the three, the sweep stops at the fleet's KV ceiling (not one replica's),
per-replica rows sum exactly to each stage, and the slow replica is flagged."""

from __future__ import annotations

import pytest

from loadgen.errors import EXIT_GUARD_ABORT
from tests.support.nginx import UPSTREAM_HEADER, running_nginx
from tests.support.replicas import (
    CAPACITY,
    LOAD,
    assert_rows_sum_to_stage,
    assert_slow_flagged,
    name_of,
    three_replicas,
)
from tests.support.runlocust import run_locust

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def test_router_fleet_capacity_ceiling_rows_and_slow_flag(tmp_path):
    with three_replicas() as sims, running_nginx([name_of(s) for s in sims.values()]) as router:
        engines = [x for s in sims.values() for x in ("--replica-metrics", s.url + "/metrics")]
        run = run_locust(router, tmp_path / "r", *LOAD, "--stages", "8,24,40,64", *engines,
                         "--upstream-header", UPSTREAM_HEADER, timeout_s=150)
    assert run.code == EXIT_GUARD_ABORT, run.stderr[-3000:]
    summary = run.summary
    names = {role: name_of(s) for role, s in sims.items()}
    assert summary["replicas"]["layout"] == "router"
    assert summary["replicas"]["capacity_tokens"] == {names[r]: CAPACITY[r] for r in names}
    guard = summary["guard"]
    # the sum of the three, and its ceiling: 6,000 / 120 = 50 (one replica alone: 20 at most)
    assert (guard["capacity_tokens"], guard["capacity_source"], guard["max_concurrency"]) == (6000, "replicas", 50)
    assert guard["stopped_before"] == 64 and [s["concurrency"] for s in summary["stages"]] == [8, 24, 40]
    assert "KV capacity of the 3 replicas: 6,000 tokens" in run.stderr
    lines = (run.run_dir / "replicas.csv").read_text().splitlines()
    assert lines[0].startswith("index,concurrency,offered_rate_per_s,replica,source,requests,") and len(lines) == 1 + 9
    assert 'id="replicas"' in (run.run_dir / "report.html").read_text()
    assert "replicas" not in (run.run_dir / "stages.csv").read_text().splitlines()[0].split(",")
    for stage in summary["stages"]:
        rows = stage["replicas"]
        assert list(rows) == list(names.values())  # every response named a known engine: no unattributed row
        assert_rows_sum_to_stage(stage)
        assert_slow_flagged(stage, sims)
        assert all(r["server"]["kv_usage_mean"] is not None for r in rows.values())  # each engine watched
        assert stage["replica_skew"] >= 1
        assert f"llm-loadgen: stage {stage['index']} replicas (skew {stage['replica_skew']:.2f})" in run.stderr
        print(f"C={stage['concurrency']} skew {stage['replica_skew']:.2f} "
              + "; ".join(f"{role} {rows[n]['requests']} reqs {rows[n]['flags']}" for role, n in names.items()))
