"""``--host`` takes what users paste (issue 36 item 2): the server's root, an OpenAI base URL
ending in ``/v1`` (with or without ``/``), or a gateway's path prefix before it. One reading
(``loadgen.wire.endpoints.server_root``), said once at the start; a short sweep against the
simulator given its ``/v1`` base URL."""

from __future__ import annotations

import pytest

from loadgen import errors
from loadgen.wire.client import StreamClient
from loadgen.wire.endpoints import host_reading, server_root
from tests.integration.test_guard import serve
from tests.support.runlocust import SMOKE, fixed_sim, run_locust

sim = fixed_sim  # the module's simulator


@pytest.mark.parametrize(("given", "root"), [
    ("http://h:8000", "http://h:8000"),
    ("http://h:8000/", "http://h:8000"),
    ("http://h:8000/v1", "http://h:8000"),
    ("http://h:8000/v1/", "http://h:8000"),
    ("https://gw/serving/llama/v1", "https://gw/serving/llama"),
    ("https://gw/serving/llama/", "https://gw/serving/llama"),
    ("http://h/v1x", "http://h/v1x"),  # only a whole /v1 segment
])
def test_every_pasted_form_has_one_root(given, root):
    assert server_root(given) == root


def test_the_reading_is_said_only_when_there_is_something_to_say():
    assert host_reading("http://h:8000", "/v1/completions") is None
    assert host_reading("http://h:8000/", "/v1/completions") is None
    line = host_reading("http://h:8000/v1/", "/v1/chat/completions")
    assert line == ("--host http://h:8000/v1/ read as the OpenAI base URL http://h:8000/v1: API paths "
                    "/v1/chat/completions and /v1/models; /metrics and the server's info at http://h:8000")
    line = host_reading("http://h:9/serving/llama/v1", "/v1/completions")
    assert "the OpenAI base URL http://h:9/serving/llama/v1 behind the path prefix /serving/llama" in line
    assert "API paths /serving/llama/v1/completions and /serving/llama/v1/models" in line
    assert line.endswith("/metrics and the server's info at http://h:9/serving/llama")
    line = host_reading("http://h:9/serving/llama", "/v1/completions")
    assert "read as the server root http://h:9/serving/llama behind the path prefix /serving/llama" in line


@pytest.mark.parametrize("given", ["{url}/serving/llama", "{url}/serving/llama/v1", "{url}/serving/llama/v1/"])
def test_the_client_hangs_the_api_paths_under_the_prefix(given):
    routes = {"/serving/llama/v1/models": (200, {"data": [{"id": "m"}]})}
    with serve(routes) as (url, hits):
        client = StreamClient(given.format(url=url))
        try:
            assert client.get_json("/v1/models")["data"][0]["id"] == "m"
        finally:
            client.close()
    assert [p for p, _ in hits] == ["/serving/llama/v1/models"]


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_a_sweep_runs_against_the_simulators_v1_base_url(sim, tmp_path):
    run = run_locust(f"{sim.url}/v1", tmp_path / "res", *SMOKE, "--stages", "1,2")
    assert run.code == errors.EXIT_OK, run.stderr[-3000:]
    said = [ln for ln in run.stderr.splitlines() if "read as the OpenAI base URL" in ln]
    assert said == [f"llm-loadgen: --host {sim.url}/v1 read as the OpenAI base URL {sim.url}/v1: API paths "
                    f"/v1/completions and /v1/models; /metrics and the server's info at {sim.url}"]
    s = run.summary
    assert [st["concurrency"] for st in s["stages"]] == [1, 2]
    assert all(st["requests"] > 0 and st["error_count"] == 0 for st in s["stages"])
    assert s["run"]["host"] == sim.url  # the root every client used
    assert s["server"]["flavor"] == "vllm"  # /metrics read at the root, not at /v1/metrics
