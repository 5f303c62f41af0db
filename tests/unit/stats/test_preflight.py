"""The start check: /v1/models parsed (pure), read once, and the one line for each refusal.

HTTP against a tiny server on 127.0.0.1 (``tests.integration.test_guard.serve``); no locust process.
"""

from __future__ import annotations

import pytest

from loadgen import errors
from loadgen.config import load_scenario
from loadgen.errors import RequestError
from loadgen.server.replies import parse_models
from loadgen.server.start_check import StartRefused, preflight
from loadgen.wire.client import StreamClient
from tests.integration.test_guard import SGLANG_INFO, SGLANG_MODELS, serve
from tests.support.runlocust import ROOT

LLAMACPP_MODELS = {"object": "list", "data": [{"id": "tiny.gguf", "object": "model", "owned_by": "llamacpp",
                                               "meta": {"n_vocab": 512, "n_ctx_train": 4096, "n_ctx": 2048}}]}


def test_parse_models_reads_each_servers_fields():
    sglang = parse_models(SGLANG_MODELS)
    assert (sglang.model, sglang.max_model_len, sglang.owned_by, sglang.flavor) == ("qwen", 262144, "sglang", "sglang")
    llama = parse_models(LLAMACPP_MODELS)
    assert (llama.model, llama.n_vocab, llama.n_ctx, llama.max_model_len) == ("tiny.gguf", 512, 2048, None)
    assert llama.owned_by == "llamacpp" and llama.flavor == "llamacpp"  # its /metrics are watched too


@pytest.mark.parametrize("answer", [None, [], {}, {"data": []}, {"data": ["x"]}, {"data": [{"id": ""}]},
                                    {"data": [{"id": 3, "max_model_len": True, "meta": {"n_vocab": -1}}]}])
def test_parse_models_of_odd_answers_lists_nothing(answer):
    info = parse_models(answer)
    assert (info.model, info.max_model_len, info.n_vocab, info.n_ctx) == (None, None, None, None)


def test_an_http_failure_carries_its_status_and_get_text_reads_raw_bodies():
    routes = {"/metrics": (200, "sglang:num_queue_reqs 2\n"), "/v1/models": (401, {"error": {"message": "no"}})}
    with serve(routes) as (url, _):
        client = StreamClient(url, read_timeout_s=2)
        try:
            assert client.get_text("/metrics") == "sglang:num_queue_reqs 2\n"
            with pytest.raises(RequestError) as auth:
                client.get_json("/v1/models")
            with pytest.raises(RequestError) as missing:
                client.get_text("/nothing")
        finally:
            client.close()
    assert (auth.value.kind, auth.value.status, auth.value.message) == (errors.HTTP_4XX, 401, "HTTP 401: no")
    assert (missing.value.status, missing.value.kind) == (404, errors.HTTP_4XX)


def scenario(tmp_path, **over):
    return load_scenario(ROOT / "config" / "smoke.yaml", {"results_dir": str(tmp_path), **over})


def run_preflight(url, sc, api_key=None):
    lines: list[str] = []
    return preflight(url, sc, api_key, lines.append), lines


@pytest.mark.parametrize("status", [401, 403])
def test_an_auth_failure_is_recognised_by_its_status(tmp_path, status):
    # the status (RequestError.status) says it is about the key; the server's words do not
    routes = {"/v1/models": (status, {"error": {"message": "invalid credentials"}})}
    with serve(routes) as (url, hits), pytest.raises(StartRefused) as refused:
        run_preflight(url, scenario(tmp_path), api_key="k")
    assert refused.value.exit_code == errors.EXIT_SERVER_UNUSABLE
    assert "refused the request" in str(refused.value) and "check the API key in" in str(refused.value)
    assert [p for p, _ in hits] == ["/v1/models"]  # nothing else asked once the run cannot start


def test_a_json_answer_without_models_is_not_openai(tmp_path):
    with serve({"/v1/models": (200, {"hello": "world"})}) as (url, _), pytest.raises(StartRefused) as refused:
        run_preflight(url, scenario(tmp_path))
    assert "is not an OpenAI-compatible server: GET /v1/models did not list a model" in str(refused.value)
    assert url in str(refused.value)


def test_model_given_goes_on_with_a_warning_and_reads_models_once(tmp_path):
    routes = {"/get_server_info": (200, SGLANG_INFO)}  # /v1/models answers 404
    with serve(routes) as (url, hits):
        info, lines = run_preflight(url, scenario(tmp_path, model="m"))
    assert info.model == "m" and info.capacity.tokens == SGLANG_INFO["max_total_num_tokens"]
    assert "model discovery failed (HTTP 404" in lines[0] and "going on with model 'm'" in lines[0]
    assert "KV capacity 1,570,000 tokens (source: sglang_server_info)" in lines[1]
    assert [p for p, _ in hits].count("/v1/models") == 1


@pytest.mark.parametrize("suffix", ["/v1", "/v1/"])
def test_a_host_ending_in_v1_is_the_openai_base_url(tmp_path, suffix):
    # the OpenAI SDK's base URL ends in /v1: the paths are not doubled (/v1/v1/models), and the
    # server's own endpoints are read at its root
    routes = {"/v1/models": (200, SGLANG_MODELS), "/get_server_info": (200, SGLANG_INFO)}
    with serve(routes) as (url, hits):
        info, _ = run_preflight(url + suffix, scenario(tmp_path))
    assert info.model == SGLANG_MODELS["data"][0]["id"] and info.capacity.source == "sglang_server_info"
    assert [p for p, _ in hits] == ["/v1/models", "/get_server_info"]


def test_discovered_model_and_the_context_check(tmp_path):
    routes = {"/v1/models": (200, SGLANG_MODELS), "/get_server_info": (200, SGLANG_INFO)}
    with serve(routes) as (url, hits):
        info, _ = run_preflight(url, scenario(tmp_path))
        with pytest.raises(StartRefused) as too_long:
            run_preflight(url, scenario(tmp_path, input_tokens=262_000, output_tokens=200))
    assert (info.model, info.max_model_len, info.flavor) == ("qwen", 262144, "sglang")
    assert too_long.value.exit_code == errors.EXIT_CONFIG
    assert "262,200 exceeds the server's max_model_len 262,144" in str(too_long.value)


def test_no_host_and_a_bad_host_are_config_errors(tmp_path):
    for host, shown in ((None, "got nothing"), ("localhost:8000", "'localhost:8000'")):
        with pytest.raises(StartRefused) as refused:
            run_preflight(host, scenario(tmp_path))
        assert refused.value.exit_code == errors.EXIT_CONFIG and shown in str(refused.value)
