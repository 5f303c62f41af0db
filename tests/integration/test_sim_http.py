"""The simulator over real HTTP on 127.0.0.1: known answers, request validation, response shapes."""

from __future__ import annotations

import json
import statistics

import gevent
import pytest

from loadgen.sim.launch import running_sim
from tests.support.raw_client import Connection, request
from tests.support.sim_http import COMPLETION, content_times, metrics, value

pytestmark = pytest.mark.integration

@pytest.fixture(scope="module")
def fixed_sim():
    with running_sim("--preset", "fixed") as sim:
        url, _proc = sim.url, sim.proc
        yield url


def test_known_answer_holds_with_hundreds_of_concurrent_streams():
    """300 streams at once: the simulator's own clock keeps its 200 ms TTFT and 50 ms gaps for every
    one of them (the bounds halfway to a wrong mechanism's figure: a first token a step late, 250 ms;
    every gap doubled, 100 ms).

    On the client's clock the streams run in step, so each token index arrives as one burst of 300
    chunks, read one after another by this one gevent loop: a stamp is at most its burst's length
    late (from the burst's first read to its last; a busy machine lengthens it, and this loop at
    6,000 chunks/s is the busiest process here). So the client's mean TTFT exceeds 200 ms by at most
    the first burst's length, and its mean gap (last - first) / 39 is the server's within the two
    bursts' lengths / 39: bounds from what it measured, not from a guess at the machine's jitter."""
    with running_sim("--preset", "fixed", "--itl-ms", "50") as sim:
        url, _ = sim.url, sim.proc
        def one(_):
            resp = request(url, "POST", "/v1/completions", {**COMPLETION, "max_tokens": 40})
            times = content_times(resp)
            assert len(times) == 40
            return times[0] - resp.t_sent, times[0], times[-1]

        results = [g.get() for g in [gevent.spawn(one, i) for i in range(300)]]
        fams = metrics(url)

    def server_mean(family: str, count: int) -> float:
        assert value(fams, f"vllm:{family}", f"vllm:{family}_count") == count
        return value(fams, f"vllm:{family}", f"vllm:{family}_sum") / count

    server_ttft, server_itl = server_mean("time_to_first_token_seconds", 300), server_mean("inter_token_latency_seconds", 300 * 39)
    assert 0.2 - 1e-3 <= server_ttft < 0.225 and 0.05 - 1e-3 <= server_itl < 0.075
    ttft, first, last = ([r[k] for r in results] for k in range(3))
    first_burst, last_burst = max(first) - min(first), max(last) - min(last)
    assert min(ttft) >= 0.2 - 1e-3 and statistics.mean(ttft) - 0.2 <= first_burst, (statistics.mean(ttft), first_burst)
    client_itl = statistics.mean((b - a) / 39 for a, b in zip(first, last, strict=True))
    assert server_itl - first_burst / 39 <= client_itl <= server_itl + last_burst / 39, (client_itl, server_itl,
                                                                                          first_burst, last_burst)
    assert value(fams, "vllm:generation_tokens", "vllm:generation_tokens_total") == 300 * 40


def test_chat_stream_shape_role_first_then_content_then_done(fixed_sim):
    body = {"messages": [{"role": "user", "content": "one two three four"}], "max_tokens": 3,
            "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
    resp = request(fixed_sim, "POST", "/v1/chat/completions", body)
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert resp.headers["transfer-encoding"] == "chunked"
    events = resp.json_events()
    assert events[0]["choices"][0]["delta"] == {"role": "assistant"}
    contents = [e["choices"][0]["delta"]["content"] for e in events[1:4]]
    assert all(c.strip() for c in contents)
    assert events[3]["choices"][0]["finish_reason"] == "length"
    assert events[4]["choices"] == [] and events[4]["usage"]["prompt_tokens"] == 4
    assert resp.events[-1][1] == b"[DONE]" and resp.complete


def test_tokenize_counts_what_usage_reports(fixed_sim):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "say  hi\nnow ok"}]
    tok = request(fixed_sim, "POST", "/tokenize", {"messages": messages}).json()
    assert tok["count"] == len(tok["tokens"]) == 6
    resp = request(fixed_sim, "POST", "/v1/chat/completions",
                   {"messages": messages, "max_tokens": 2, "ignore_eos": True})
    assert resp.json()["usage"] == {"prompt_tokens": 6, "total_tokens": 8, "completion_tokens": 2}
    assert request(fixed_sim, "POST", "/tokenize", {"prompt": "a b c"}).json()["count"] == 3


def test_keep_alive_serves_many_requests_on_one_connection(fixed_sim):
    conn = Connection(fixed_sim)
    try:
        for i in range(5):
            resp = conn.request("POST", "/v1/completions", {**COMPLETION, "max_tokens": 2, "stream": i % 2 == 0})
            assert resp.status == 200 and resp.complete and not resp.closed
        assert conn.request("GET", "/health").status == 200
    finally:
        conn.close()


def test_non_stream_completion_and_models(fixed_sim):
    resp = request(fixed_sim, "POST", "/v1/completions", {**COMPLETION, "stream": False, "max_tokens": 7})
    body = resp.json()
    assert body["usage"] == {"prompt_tokens": 5, "total_tokens": 12, "completion_tokens": 7}
    assert len(body["choices"][0]["text"].split()) == 7 and body["choices"][0]["finish_reason"] == "length"
    models = request(fixed_sim, "GET", "/v1/models").json()
    assert models["data"][0]["max_model_len"] == 32768 and models["data"][0]["id"] == "llmsim-fixed"


@pytest.mark.parametrize("body, fragment", [
    ({"prompt": [1] * 30000, "max_tokens": 3000}, "maximum context length is 32768"),
    ({"prompt": [], "max_tokens": 3}, "cannot be empty"),
    ({"prompt": [1], "max_tokens": 0}, "max_tokens"),
    ({"prompt": [1], "max_tokens": 4, "min_tokens": 5}, "min_tokens"),
    ({"prompt": ["a", "b"], "max_tokens": 4}, "batched"),
])
def test_bad_requests_get_400_with_openai_error(fixed_sim, body, fragment):
    assert request(fixed_sim, "GET", "/v1/completions").status == 405
    assert request(fixed_sim, "GET", "/nowhere").status == 404
    resp = request(fixed_sim, "POST", "/v1/completions", body)
    assert resp.status == 400
    err = resp.json()["error"]
    assert fragment in err["message"] and err["code"] == 400 and err["type"] == "BadRequestError"


def test_without_ignore_eos_some_requests_stop_early():
    with running_sim("--preset", "fixed", "--ttft-ms", "0", "--itl-ms", "0", "--eos-prob", "0.5") as sim:
        url, _ = sim.url, sim.proc
        usage = [request(url, "POST", "/v1/completions", {"prompt": [1], "max_tokens": 20, "stream": False})
                 .json() for _ in range(40)]
        exact = [request(url, "POST", "/v1/completions",
                         {"prompt": [1], "max_tokens": 20, "min_tokens": 20, "stream": False}).json()
                 for _ in range(10)]
    short = [u for u in usage if u["usage"]["completion_tokens"] < 20]
    assert 5 <= len(short) <= 35 and all(u["choices"][0]["finish_reason"] == "stop" for u in short)
    assert all(u["usage"]["completion_tokens"] == 20 for u in exact)


def test_queue_cap_answers_503_and_engine_gauges_show_the_queue():
    args = ("--preset", "qwen35-397b-8gpu", "--max-running", "1", "--max-queued", "1", "--time-scale", "10")
    with running_sim(*args) as sim:
        url, _ = sim.url, sim.proc
        body = {"prompt": [1] * 100, "max_tokens": 5000, "ignore_eos": True, "stream": True}
        first = []
        for _ in range(2):  # one at a time: the queue holds a request until the next engine step
            first.append(gevent.spawn(request, url, "POST", "/v1/completions", body))
            gevent.sleep(0.2)
        fams = metrics(url)
        assert value(fams, "sglang:num_running_reqs") == 1 and value(fams, "sglang:num_queue_reqs") == 1
        rejected = request(url, "POST", "/v1/completions", body)
        assert rejected.status == 503 and rejected.json()["error"]["code"] == 503
        for g in first:
            g.kill()
        info = request(url, "GET", "/get_server_info").json()
    assert info["max_total_num_tokens"] == 1_570_000


def test_metrics_parse_with_the_real_servers_names_for_both_flavors(fixed_sim):
    request(fixed_sim, "POST", "/v1/completions", {**COMPLETION, "max_tokens": 3})
    fams = metrics(fixed_sim)
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:num_preemptions", "vllm:cache_config_info", "vllm:prompt_tokens",
                 "vllm:generation_tokens", "vllm:time_to_first_token_seconds",
                 "vllm:inter_token_latency_seconds", "llmsim_step_overruns", "llmsim_steps",
                 "llmsim_time_scale", "llmsim_faults_injected"):
        assert name in fams, name
        assert all(s.labels["model_name"] == "llmsim-fixed" for s in fams[name])
    info = fams["vllm:cache_config_info"][0].labels
    assert int(info["num_gpu_blocks"]) * int(info["block_size"]) == 1_000_000
    ttft_le = [s.labels["le"] for s in fams["vllm:time_to_first_token_seconds"] if s.name.endswith("_bucket")]
    assert ttft_le[0] == "0.001" and ttft_le[-1] == "+Inf"
    with running_sim("--preset", "qwen35-397b-8gpu", "--time-scale", "100") as sim:
        url, _ = sim.url, sim.proc
        resp = request(url, "POST", "/v1/completions", COMPLETION)
        fams = metrics(url)
        assert request(url, "GET", "/server_info").json()["max_total_num_tokens"] == 1_570_000
    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage",
                 "sglang:max_total_num_tokens", "sglang:num_retracted_requests", "sglang:prompt_tokens",
                 "sglang:generation_tokens", "sglang:time_to_first_token_seconds",
                 "sglang:inter_token_latency_seconds", "llmsim_step_overruns"):
        assert name in fams, name
    chunks = [e["choices"][0]["text"] for e in resp.json_events() if e["choices"]]
    assert sum(len(c.split()) for c in chunks) == 100
    assert len(chunks) < 60  # speculative decoding: several tokens per chunk (mean accept 2.75)
    assert value(fams, "sglang:max_total_num_tokens") == 1_570_000
    assert value(fams, "sglang:generation_tokens", "sglang:generation_tokens_total") == 100
    assert value(fams, "sglang:prompt_tokens", "sglang:prompt_tokens_total") == 5
    # SGLang's ITL histogram counts tokens, not chunks: 99 tokens after the first one
    assert value(fams, "sglang:inter_token_latency_seconds", "sglang:inter_token_latency_seconds_count") == 99


def test_a_client_that_hangs_up_frees_its_place_in_the_engine():
    args = ("--preset", "qwen35-397b-8gpu", "--max-running", "1", "--time-scale", "10")
    long_body = {"prompt": [1] * 100, "max_tokens": 5000, "ignore_eos": True}
    with running_sim(*args) as sim:
        url, _ = sim.url, sim.proc
        running = Connection(url)  # non-streaming: nothing is written until the end
        queued = Connection(url)  # streaming, but waits in the queue behind it
        for conn, stream in ((running, False), (queued, True)):
            body = json.dumps({**long_body, "stream": stream}).encode()
            conn.sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                              % (len(body), body))
        gevent.sleep(0.3)
        fams = metrics(url)
        assert value(fams, "sglang:num_running_reqs") == 1 and value(fams, "sglang:num_queue_reqs") == 1
        running.close()
        queued.close()
        gevent.sleep(0.3)
        fams = metrics(url)
        assert value(fams, "sglang:num_running_reqs") == 0 and value(fams, "sglang:num_queue_reqs") == 0
        assert value(fams, "sglang:token_usage") == 0
        quick = request(url, "POST", "/v1/completions", {**COMPLETION, "max_tokens": 20}, timeout_s=5)
        assert quick.done


def test_vllm_engine_preempts_and_every_stream_still_gets_each_token_once():
    args = ("--preset", "llama8b-1gpu-vllm", "--kv-tokens", "20000", "--max-model-len", "4096",
            "--time-scale", "50")
    body = {**COMPLETION, "prompt": [3] * 500, "max_tokens": 500,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    with running_sim(*args) as sim:
        url, _ = sim.url, sim.proc
        responses = [g.get() for g in [gevent.spawn(request, url, "POST", "/v1/completions", body)
                                       for _ in range(30)]]  # 30 x 1000 tokens > 20,000
        fams = metrics(url)
    assert value(fams, "vllm:num_preemptions", "vllm:num_preemptions_total") > 0
    for resp in responses:
        chunks = [e for e in resp.json_events() if e["choices"]]
        assert [e["usage"]["completion_tokens"] for e in chunks] == list(range(1, 501))
        assert resp.done
    assert value(fams, "vllm:generation_tokens", "vllm:generation_tokens_total") == 30 * 500
    assert value(fams, "vllm:prompt_tokens", "vllm:prompt_tokens_total") == 30 * 500
    assert value(fams, "vllm:kv_cache_usage_perc") == 0


def test_request_latency_histograms_add_up_on_the_simulators_clock_in_both_flavors():
    """vLLM: TTFT = queue + prefill and E2E = TTFT + decode, sum for sum; with a batch of one the
    second request queues for the first one's whole run (50 tokens of 20 ms steps, about 1 s)."""
    body = {"prompt": [1] * 10, "max_tokens": 50, "ignore_eos": True, "stream": True}
    engine = ("--timing", "engine", "--max-running", "1", "--step-base-ms", "20", "--step-per-seq-ms", "0",
              "--step-per-prefill-token-us", "0", "--time-scale", "1")
    with running_sim(*engine, "--flavor", "vllm") as sim:
        both = [gevent.spawn(request, sim.url, "POST", "/v1/completions", body) for _ in range(2)]
        gevent.joinall(both)
        fams = metrics(sim.url)

    def total(name: str, what: str) -> float:
        return value(fams, name, f"{name}_{what}")

    p = "vllm:"
    assert total(p + "request_queue_time_seconds", "count") == 2
    ttft = total(p + "time_to_first_token_seconds", "sum")
    assert ttft == pytest.approx(total(p + "request_queue_time_seconds", "sum")
                                 + total(p + "request_prefill_time_seconds", "sum"), abs=1e-6)
    assert total(p + "e2e_request_latency_seconds", "sum") == pytest.approx(
        ttft + total(p + "request_decode_time_seconds", "sum"), abs=1e-6)
    # one queued behind the other for its 50 steps of 20 ms (the first waits at most one step)
    assert 0.9 < total(p + "request_queue_time_seconds", "sum") < 1.3
    with running_sim(*engine, "--flavor", "sglang") as sim:
        gevent.joinall([gevent.spawn(request, sim.url, "POST", "/v1/completions", body) for _ in range(2)])
        fams = metrics(sim.url)
    assert total("sglang:queue_time_seconds", "count") == 2
    assert 0.9 < total("sglang:queue_time_seconds", "sum") < 1.3
    assert total("sglang:e2e_request_latency_seconds", "count") == 2


def test_network_delay_holds_every_write_outside_the_simulators_own_clock():
    """--network-delay-ms 100 on the fixed model (TTFT 200 ms, 20 ms per token): the client's
    first token comes 100 ms after the server's own TTFT, the gaps stay 20 ms, and /metrics' TTFT
    stays 200 ms (the server's clock stops before the delay). Non-streaming bodies are held as long.

    The bounds come from the mechanism, not from a guess at the machine's jitter: a byte is
    released no earlier than its engine time plus the delay and the server's arrival is after the
    client's send, so ``client TTFT - server TTFT >= 0.1`` exactly; what lateness a busy machine
    adds is only ever more, so each upper bound sits halfway to the figure the wrong mechanism would
    give (the delay held twice: +0.2; inside the server's clock: server TTFT 0.3; held per chunk:
    gaps of 0.12)."""
    with running_sim("--preset", "fixed", "--network-delay-ms", "100") as sim:
        resp = request(sim.url, "POST", "/v1/completions", {**COMPLETION, "max_tokens": 20})
        times = content_times(resp)
        assert resp.status == 200 and resp.done and len(times) == 20
        fams = metrics(sim.url)
        server_ttft = value(fams, "vllm:time_to_first_token_seconds", "vllm:time_to_first_token_seconds_sum")
        assert 0.2 - 1e-3 <= server_ttft < 0.25
        held = times[0] - resp.t_sent - server_ttft
        assert 0.1 - 1e-3 <= held < 0.15
        assert 0.015 < statistics.mean(b - a for a, b in zip(times, times[1:], strict=False)) < 0.07
        plain = request(sim.url, "POST", "/v1/completions", {**COMPLETION, "max_tokens": 5, "stream": False})
        assert plain.status == 200 and plain.json()["usage"]["completion_tokens"] == 5
