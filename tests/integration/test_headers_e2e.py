"""``--header 'Name: value'`` against a gateway that requires it (issue 36 item 1), end to end.

The simulator plays the gateway (``--require-header``): every request but GET /health without the
header is answered 401, with another value 403. Without ``--header`` the run must stop in seconds
with the gateway's own words (exit 4); with it the sweep runs, the start check, the streams and the
server watch (/metrics sits behind the same gateway) all get through, and the credential's value is
nowhere we write.
"""

from __future__ import annotations

import time
import uuid

import pytest

from loadgen import errors
from loadgen.sim.launch import running_sim
from tests.support.runlocust import SMOKE, run_locust

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SECRET = f"gw-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def gateway():
    with running_sim("--preset", "fixed", "--ttft-ms", "20", "--itl-ms", "5",
                     "--require-header", f"X-Api-Key: {SECRET}") as sim:
        yield sim


def _files(root):
    return [p for p in sorted(root.rglob("*")) if p.is_file()]


@pytest.mark.parametrize("model", [(), ("--model", "m")], ids=["discovered", "given"])
def test_without_the_header_the_run_stops_in_seconds_with_the_gateways_reason(gateway, tmp_path, model):
    """Without --model the models read is refused; with it, the probe request (the run's own request)."""
    t0 = time.monotonic()
    run = run_locust(gateway.url, tmp_path / "res", *SMOKE, "--stages", "1", *model, timeout_s=60)
    took_s = time.monotonic() - t0
    assert run.code == errors.EXIT_SERVER_UNUSABLE, run.stderr[-3000:]
    assert took_s < 30, took_s  # the start check's answer, not a sweep of failures
    assert "401" in run.stderr and "gateway: header x-api-key missing" in run.stderr, run.stderr[-3000:]
    assert run.summary["stages"] == [] and run.summary["run"]["stop_reason"] == "error"


def test_a_wrong_value_stops_the_run_with_the_gateways_403(gateway, tmp_path):
    wrong = run_locust(gateway.url, tmp_path / "wrong", *SMOKE, "--stages", "1", "--header", "X-Api-Key: nope",
                       timeout_s=60)
    assert wrong.code == errors.EXIT_SERVER_UNUSABLE, wrong.stderr[-3000:]
    assert "HTTP 403" in wrong.stderr and "gateway: header x-api-key not accepted" in wrong.stderr


def test_with_the_header_the_sweep_runs_and_the_value_is_written_nowhere(gateway, tmp_path):
    run = run_locust(gateway.url, tmp_path / "res", *SMOKE, "--stages", "1,2", "--model", "m",
                     "--header", f"x-api-key: {SECRET}", "--header", "X-Tenant: team-a",
                     "--requests-jsonl")
    assert run.code == errors.EXIT_OK, run.stderr[-3000:]
    s = run.summary
    assert [st["concurrency"] for st in s["stages"]] == [1, 2] and all(st["requests"] > 0 for st in s["stages"])
    assert all(st["error_count"] == 0 for st in s["stages"])
    # the start check read the KV capacity from /metrics behind the gateway, and the server watch
    # polled it there during every window
    assert "KV capacity 1,000,000 tokens (source: vllm_cache_config)" in run.stderr, run.stderr[-3000:]
    assert all(st["server"]["polls"] > 0 for st in s["stages"]), [st["server"] for st in s["stages"]]
    # the credential is hidden in the scenario; the other header is kept as given
    assert s["scenario"]["request"]["headers"] == {"x-api-key": "<hidden>", "X-Tenant": "team-a"}
    assert SECRET not in run.stdout + run.stderr
    assert [p for p in _files(tmp_path / "res") if SECRET.encode() in p.read_bytes()] == []


def test_workers_get_the_headers_with_the_other_options(gateway, tmp_path):
    """--processes 2: the master relays its parsed options; a worker without the header would meet
    the gateway's 401 on every request."""
    run = run_locust(gateway.url, tmp_path / "res", *SMOKE, "--stages", "2,4", "--processes", "2",
                     "--header", f"X-Api-Key: {SECRET}")
    assert run.code == errors.EXIT_OK, run.stderr[-3000:]
    s = run.summary
    assert s["run"]["workers"] == 2
    seen = [(st["concurrency"], st["requests"], st["errors"], st["flags"]) for st in s["stages"]]
    assert all(st["requests"] > 0 and st["error_count"] == 0 for st in s["stages"]), (seen, run.stderr[-3000:])
    assert SECRET not in run.stdout + run.stderr
