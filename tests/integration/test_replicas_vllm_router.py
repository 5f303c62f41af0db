"""The three simulator replicas behind a router built for LLMs: vLLM's own (the PyPI package
vllm-router, scripts/ensure-vllm-router.sh), given only as --host. The run finds the engines itself
(the router's GET /list_workers), sums their capacities for the guard, stops the sweep at the
fleet's KV ceiling, and reads each engine's /metrics for its row: the router names no engine per
response, so the rows are the engines' own figures, and the slow engine is flagged from them."""

from __future__ import annotations

import subprocess
import time

import pytest

from loadgen.errors import EXIT_GUARD_ABORT
from tests.support.engine import http, required
from tests.support.ports import free_port
from tests.support.replicas import CAPACITY, LOAD, name_of, three_replicas
from tests.support.runlocust import ROOT, run_locust

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _router() -> str:
    return required("LLM_LOADGEN_VLLM_ROUTER", ROOT / "scripts" / "ensure-vllm-router.sh", "the vllm-router command",
                    "vllm-router")


def test_vllm_router_found_engines_fleet_capacity_and_engine_rows(tmp_path):
    router = _router()
    with three_replicas() as sims:
        port = free_port()
        proc = subprocess.Popen([router, "--host", "127.0.0.1", "--port", str(port), "--policy", "power_of_two",
                                 "--log-level", "warning", "--worker-urls", *[s.url for s in sims.values()]],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    if http(url + "/v1/models", timeout_s=2)[0] == 200:
                        break
                except OSError:
                    time.sleep(0.2)
            run = run_locust(url, tmp_path / "r", *LOAD, "--stages", "8,24,64", timeout_s=120)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    assert run.code == EXIT_GUARD_ABORT, run.stderr[-3000:]
    names = {role: name_of(s) for role, s in sims.items()}
    assert f"{url} is a router: GET /list_workers lists 3 engines" in run.stderr
    summary = run.summary
    assert summary["replicas"]["layout"] == "router"
    assert summary["replicas"]["capacity_tokens"] == {names[r]: CAPACITY[r] for r in names}
    guard = summary["guard"]
    assert (guard["capacity_tokens"], guard["max_concurrency"], guard["stopped_before"]) == (6000, 50, 64)
    for stage in summary["stages"]:
        rows = stage["replicas"]
        assert all(r["source"] == "engine" and r["requests"] > 0 for r in rows.values()), rows
        assert "slow" in rows[names["slow"]]["flags"], rows  # its ITL p50 is 4 x the others'
        assert "slow" not in rows[names["fast"]]["flags"] + rows[names["small"]]["flags"], rows
