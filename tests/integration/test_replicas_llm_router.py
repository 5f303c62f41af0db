"""The three simulator replicas behind a router built for LLMs, given only as --host: vLLM's
(vllm-router 0.1.17, power of two choices) and SGLang's (sglang-router 0.3.2, round robin), from PyPI
(scripts/ensure-llm-router.sh). The run finds the engines itself (the router's GET /workers), sums
their capacities for the guard, stops the sweep at the fleet's KV ceiling, and reads each engine's
/metrics for its row: these routers name no engine per response, so the rows are the engines' own
figures, and the slow engine is flagged from them (its ITL p50 is 4 x the others')."""

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

ROUTERS = {  # router -> (its command's arguments before the workers, the run's own options)
    "vllm": (("--policy", "power_of_two", "--log-level", "warning"), ()),
    # sglang-router lists "unknown" as its model (GET /v1/models): the run names the engines' model
    "sglang": (("launch", "--policy", "round_robin"), ("--model", "llmsim-fixed")),
}


def _command(router: str, port: int, urls: list[str]) -> list[str]:
    exe = required(f"LLM_LOADGEN_{router.upper()}_ROUTER", ROOT / "scripts" / "ensure-llm-router.sh",
                   f"the {router}-router command", f"{router}-router", (router,))
    own = ("--prometheus-port", str(free_port())) if router == "sglang" else ()  # its exporter: not a fixed port
    return [exe, *ROUTERS[router][0], "--host", "127.0.0.1", "--port", str(port), *own, "--worker-urls", *urls]


@pytest.mark.parametrize("router", list(ROUTERS))
def test_router_found_engines_fleet_capacity_and_engine_rows(router, tmp_path):
    with three_replicas() as sims:
        port = free_port()
        proc = subprocess.Popen(_command(router, port, [s.url for s in sims.values()]), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    if http(url + "/health", timeout_s=2)[0] == 200:
                        break
                except OSError:
                    time.sleep(0.2)
            run = run_locust(url, tmp_path / "r", *LOAD, "--stages", "8,24,64", *ROUTERS[router][1], timeout_s=120)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    assert run.code == EXIT_GUARD_ABORT, run.stderr[-3000:]
    names = {role: name_of(s) for role, s in sims.items()}
    assert f"{url} is a router: GET /workers lists 3 engines" in run.stderr
    summary = run.summary
    assert summary["replicas"]["layout"] == "router"
    assert summary["replicas"]["capacity_tokens"] == {names[r]: CAPACITY[r] for r in names}
    guard = summary["guard"]
    assert (guard["capacity_tokens"], guard["max_concurrency"], guard["stopped_before"]) == (6000, 50, 64)
    for stage in summary["stages"]:
        rows = stage["replicas"]
        assert all(r["source"] == "engine" and r["requests"] > 0 for r in rows.values()), rows
        assert "slow" in rows[names["slow"]]["flags"], rows
        assert "slow" not in rows[names["fast"]]["flags"] + rows[names["small"]]["flags"], rows
        print(f"{router} C={stage['concurrency']} skew {stage['replica_skew']:.2f} "
              + "; ".join(f"{role} {rows[n]['requests']} reqs {rows[n]['flags']}" for role, n in names.items()))
