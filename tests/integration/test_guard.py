"""KV-capacity guard: projection/decision/plan (pure), metrics parsing, the stage accumulator with a
fake clock, discovery against a tiny local HTTP server, and the polling greenlet."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import textwrap
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import gevent
import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.errors import ConfigError
from loadgen.run.kv_guard import (
    decide,
    max_fitting_concurrency,
    projected_kv_tokens,
)
from loadgen.server.overload import OverCapacityRule, StageWatch
from loadgen.server.replies import (
    capacity_from_server_info,
    capacity_from_sglang_metrics,
    capacity_from_vllm_metrics,
    flavor_of,
    parse_metrics,
    slots_from_props,
    watch_sample,
)
from loadgen.server.start_check import models_and_capacity
from loadgen.server.watch import ServerWatch
from tests.support.ports import free_port

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SEED_CAPACITY = 1_570_000
SWEEP = [2**i for i in range(11)]  # 1, 2, 4, ..., 1024


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# ---------------------------------------------------------------- projection and decision (pure)


def test_projection_formula_with_seed_numbers():
    assert projected_kv_tokens(512, 1000, 1000, 0) == 1_024_000
    assert projected_kv_tokens(1024, 1000, 1000, 0) == 2_048_000
    assert projected_kv_tokens(512, 1000, 1000, 0.1) == 1_126_400
    assert projected_kv_tokens(3, 100, 20, 0.25) == 450


def test_seed_sweep_abort_runs_512_and_refuses_1024():
    fits = decide(512, SEED_CAPACITY, 1000, 1000, 0.0, "abort")
    assert (fits.allowed, fits.run_concurrency, fits.breach) == (True, 512, False)
    refused = decide(1024, SEED_CAPACITY, 1000, 1000, 0.0, "abort")
    assert (refused.allowed, refused.run_concurrency, refused.breach) == (False, None, True)
    assert refused.projected_tokens == 2_048_000 and refused.capacity_tokens == SEED_CAPACITY
    for part in ("1024", "2,048,000", "1,570,000", "--guard-action clamp", "stages.max to 785"):
        assert part in refused.message
    assert "\n" not in refused.message


def test_seed_sweep_clamp_runs_785_which_fits_while_786_does_not():
    clamped = decide(1024, SEED_CAPACITY, 1000, 1000, 0.0, "clamp")
    assert (clamped.allowed, clamped.run_concurrency, clamped.breach) == (True, 785, True)
    assert not decide(785, SEED_CAPACITY, 1000, 1000, 0.0, "abort").breach
    assert decide(786, SEED_CAPACITY, 1000, 1000, 0.0, "abort").breach
    with_margin = decide(1024, SEED_CAPACITY, 1000, 1000, 0.1, "clamp")
    assert with_margin.run_concurrency == 713  # floor(1,570,000 / 2,200)


def test_warn_runs_anyway_and_unknown_capacity_is_unguarded():
    warned = decide(1024, SEED_CAPACITY, 1000, 1000, 0.0, "warn")
    assert (warned.allowed, warned.run_concurrency, warned.breach) == (True, 1024, True)
    assert "warn" in warned.message
    unguarded = decide(4096, None, 1000, 1000, 0.0, "abort")
    assert (unguarded.allowed, unguarded.run_concurrency, unguarded.breach) == (True, 4096, False)
    assert unguarded.capacity_tokens is None and "guard.kv_capacity_tokens" in unguarded.message


def test_exact_boundary_is_not_a_float_artifact():
    # 3 x 1000 x 1.1 is 3300.0000000000005 in floats; the guard must call 3300 a fit.
    assert not decide(3, 3300, 500, 500, 0.1, "abort").breach
    assert max_fitting_concurrency(3300, 500, 500, 0.1) == 3
    assert projected_kv_tokens(3, 500, 500, 0.1) == 3300
    too_small = decide(1, 1099, 500, 500, 0.1, "clamp")
    assert (too_small.allowed, too_small.run_concurrency) == (False, None)
    assert "not even one request" in too_small.message


@pytest.mark.parametrize("margin", [0.0, 0.05, 0.1, 0.3, 1.0])
@pytest.mark.parametrize("capacity", [1, 1999, 2000, 65_536, 1_570_000, 1_570_001, 10**9 + 7])
@pytest.mark.parametrize("tokens", [(1000, 1000), (128, 7), (1, 0)])
def test_max_fitting_concurrency_is_the_largest_that_fits(capacity, margin, tokens):
    c = max_fitting_concurrency(capacity, *tokens, margin)
    assert not decide(c + 1, capacity, *tokens, margin, "abort").allowed
    if c >= 1:
        assert not decide(c, capacity, *tokens, margin, "abort").breach


def test_bad_action_and_margin_name_the_key():
    with pytest.raises(ConfigError, match="guard.action"):
        decide(1, 10, 1, 1, 0.0, "explode")
    with pytest.raises(ConfigError, match="guard.margin"):
        decide(1, 10, 1, 1, -0.1, "abort")
    with pytest.raises(ConfigError, match="guard.margin"):
        decide(1, 10, 1, 1, float("nan"), "abort")


# ---------------------------------------------------------------- metrics parsing (pure)


def test_parser_keeps_colon_names_and_counter_sample_names():
    samples = parse_metrics(fixture("metrics_vllm_new.txt"))
    assert "vllm:num_preemptions_total" in samples and "vllm:cache_config_info" in samples
    assert sorted(v for _, v in samples["vllm:num_preemptions_total"]) == [2.0, 9.0]


def test_parser_survives_a_malformed_line():
    text = fixture("metrics_sglang.txt").replace(
        "# HELP sglang:token_usage", 'sglang:broken{model_name="x" not a number\n# HELP sglang:token_usage'
    )
    with pytest.raises(ValueError):  # why the fallback exists: the library stops at the bad line
        list(text_string_to_metric_families(text))
    samples = parse_metrics(text)
    assert capacity_from_sglang_metrics(samples) == SEED_CAPACITY
    assert watch_sample(samples, "sglang")["kv_usage"] == 0.82
    assert "sglang:broken" not in samples


def test_capacity_from_each_fixture():
    assert capacity_from_vllm_metrics(parse_metrics(fixture("metrics_vllm_old.txt"))) == 98125 * 16
    # new vLLM: kv_cache_size_tokens wins over blocks x block_size (1000 x 16), summed over 2 engines
    assert capacity_from_vllm_metrics(parse_metrics(fixture("metrics_vllm_new.txt"))) == 2 * 785_000
    assert capacity_from_sglang_metrics(parse_metrics(fixture("metrics_sglang.txt"))) == SEED_CAPACITY
    assert capacity_from_vllm_metrics(parse_metrics(fixture("metrics_sglang.txt"))) is None
    assert (
        capacity_from_server_info({"max_total_num_tokens": SEED_CAPACITY, "max_total_tokens": None})
        == SEED_CAPACITY
    )
    assert capacity_from_server_info({"internal_states": [{"max_total_num_tokens": 12345}]}) == 12345
    assert capacity_from_server_info({"max_total_tokens": 99}) is None
    assert capacity_from_server_info(["not", "a", "dict"]) is None


def test_vllm_capacity_before_profiling_is_unknown():
    text = 'vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1.0\n'
    assert capacity_from_vllm_metrics(parse_metrics(text)) is None


def test_tp_replicas_count_once_and_dp_ranks_add_up():
    replicas = "".join(
        f'sglang:max_total_num_tokens{{dp_rank="0",model_name="m",tp_rank="{r}"}} 785000\n' for r in range(8)
    )
    assert capacity_from_sglang_metrics(parse_metrics(replicas)) == 785_000
    ranks = replicas + replicas.replace('dp_rank="0"', 'dp_rank="1"')
    assert capacity_from_sglang_metrics(parse_metrics(ranks)) == SEED_CAPACITY


def test_watch_sample_per_flavor():
    new = watch_sample(parse_metrics(fixture("metrics_vllm_new.txt")), None)
    assert new == {"preemptions_total": 11.0, "waiting": 6.0, "running": 506.0, "kv_usage": 0.98}
    old = watch_sample(parse_metrics(fixture("metrics_vllm_old.txt")), "vllm")
    assert old["kv_usage"] == 0.6521 and old["preemptions_total"] == 17.0  # deprecated gauge name
    sgl = watch_sample(parse_metrics(fixture("metrics_sglang.txt")), None)
    assert sgl == {"preemptions_total": 5.0, "waiting": 32.0, "running": 480.0, "kv_usage": 0.82}
    assert watch_sample(parse_metrics("process_open_fds 12\n"), None) is None
    assert watch_sample(parse_metrics(fixture("metrics_sglang.txt")), "vllm") is None


# ---------------------------------------------------------------- StageWatch with a fake clock


def s(preempt=None, waiting=0.0, running=0.0, usage=None):
    return {"preemptions_total": preempt, "waiting": waiting, "running": running, "kv_usage": usage}


def test_stage_counts_preemptions_since_the_last_poll_before_it():
    w = StageWatch()
    w.feed(0.0, s(preempt=40))  # baseline from earlier stages: not this stage's
    w.begin(0, 1.0)
    for t, p in [(2.0, 40), (4.0, 43), (6.0, 45)]:
        w.feed(t, s(preempt=p, running=300, usage=0.5 + t / 100))
    out = w.end(0, 7.0)
    assert out["preemptions"] == 5 and out["over_capacity"] is True
    assert out["polls"] == 3 and out["watched_s"] == 6.0
    assert (out["running_max"], out["kv_usage_max"], out["waiting_max"]) == (300, 0.56, 0.0)


def test_counter_reset_counts_the_new_value():
    w = StageWatch()
    w.begin(1, 0.0)
    for t, p in [(1, 10), (2, 12), (3, 1), (4, 3)]:  # server restarted between t=2 and t=3
        w.feed(float(t), s(preempt=p))
    assert w.end(1, 5.0)["preemptions"] == 2 + 1 + 2


def test_prefill_bursts_of_a_closed_loop_are_not_over_capacity():
    """Users in step: every request cycle the whole batch re-queues for a poll or two."""
    w = StageWatch()
    w.begin(0, 0.0, concurrency=64)
    waits = [0, 0, 60, 30, 0, 0, 0, 0, 0, 55, 20, 0, 0, 0, 0, 0]
    for t, waiting in enumerate(waits):
        w.feed(float(t), s(preempt=0, waiting=waiting, usage=0.26))
    out = w.end(0, 16.0)
    assert out["over_capacity"] is False and out["over_capacity_evidence"] == []
    assert (out["queued_polls_max"], out["waiting_max"], out["queued_share"]) == (2, 60, 4 / 16)


def test_a_lone_waiting_request_at_low_concurrency_is_not_over_capacity():
    w = StageWatch()
    w.begin(0, 0.0, concurrency=16)  # the 200/200 sweep: C=16, waiting_max 1, KV 0.3%
    for t in range(10):
        w.feed(float(t), s(preempt=0, waiting=1, usage=0.003))
    assert w.end(0, 10.0)["over_capacity"] is False


def test_sustained_queue_is_over_capacity_with_its_evidence():
    w = StageWatch()
    w.begin(2, 0.0, concurrency=64)
    for t, waiting in enumerate([0, 12, 20, 25, 30, 7, 28, 31]):  # >= 6.4 in 7 of 8 polls
        w.feed(float(t), s(preempt=0, waiting=waiting))
    out = w.end(2, 8.0)
    assert out["over_capacity"] is True
    assert out["over_capacity_evidence"] == ["queue >= 6.4 in 7 of 8 polls (waiting max 31)"]


def test_kv_nearly_full_is_over_capacity_and_the_rule_is_configurable():
    polls = [s(preempt=0, usage=u) for u in (0.97, 0.985, 0.99, 0.99)]
    w = StageWatch()
    w.begin(0, 0.0, concurrency=8)
    for t, p in enumerate(polls):
        w.feed(float(t), p)
    assert w.end(0, 4.0)["over_capacity_evidence"] == ["KV use >= 98% in 3 of 4 polls"]
    lax = StageWatch(OverCapacityRule(kv_usage=0.995))
    lax.begin(0, 0.0, concurrency=8)
    for t, p in enumerate(polls):
        lax.feed(float(t), p)
    assert lax.end(0, 4.0)["over_capacity"] is False


def test_stage_without_polls_is_unknown_not_fine():
    w = StageWatch()
    w.begin(3, 0.0)
    assert w.end(3, 10.0)["over_capacity"] is None
    assert w.end(4, 11.0)["polls"] == 0  # end without begin: empty, no crash


def test_stages_are_separate():
    w = StageWatch()
    w.begin(0, 0.0)
    w.feed(1.0, s(preempt=0, waiting=0, running=10))
    assert w.end(0, 2.0)["over_capacity"] is False
    w.feed(3.0, s(preempt=2, waiting=0, running=20))  # between stages: moves the baseline only
    w.begin(1, 4.0)
    w.feed(5.0, s(preempt=2, waiting=0, running=20))
    out = w.end(1, 6.0)
    assert (out["preemptions"], out["running_max"], out["over_capacity"]) == (0, 20, False)


# ---------------------------------------------------------------- discovery over HTTP (127.0.0.1)

SGLANG_INFO = {"max_total_num_tokens": SEED_CAPACITY, "max_total_tokens": None, "tp_size": 8}
SGLANG_MODELS = {"object": "list", "data": [{"id": "qwen", "owned_by": "sglang", "max_model_len": 262144}]}
VLLM_MODELS = {"object": "list", "data": [{"id": "qwen", "owned_by": "vllm", "max_model_len": 131072}]}


@contextmanager
def serve(routes: dict):
    """Serve {path: (status, body) or callable() -> (status, body)} on 127.0.0.1; 404 elsewhere."""
    hits: list[tuple[str, str | None]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append((self.path, self.headers.get("Authorization")))
            route = routes.get(self.path, (404, '{"detail": "Not Found"}'))
            status, body = route() if callable(route) else route
            body = json.dumps(body) if isinstance(body, dict) else body
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            # JSON, like an API server without the route: an HTML 501 would be "not OpenAI"
            data = b'{"error": {"message": "POST is not served here"}}'
            self.send_response(501)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()


def discover(url: str, api_key: str | None = None, timeout_s: float = 2.0, configured: int | None = None):
    """The start check's capacity: /v1/models read once, then the capacity sources."""
    return models_and_capacity(url, api_key=api_key, configured_capacity=configured,
                               models_timeouts_s=(timeout_s, timeout_s), probe_timeout_s=timeout_s)[1]


def test_discover_sglang_server_info_with_auth_header():
    routes = {"/v1/models": (200, SGLANG_MODELS), "/get_server_info": (200, SGLANG_INFO)}
    with serve(routes) as (url, hits):
        cap = discover(url, "k")
    assert (cap.tokens, cap.source, cap.flavor, cap.max_model_len) == (
        SEED_CAPACITY,
        "sglang_server_info",
        "sglang",
        262144,
    )
    assert "1,570,000" in cap.detail
    assert [p for p, _ in hits] == ["/v1/models", "/get_server_info"]  # /v1/models read once
    assert all(auth == "Bearer k" for _, auth in hits)


def test_a_v1_suffix_reads_the_management_endpoints_at_the_root():
    """--host http://h:p/v1/ is the OpenAI base URL: /v1/models there, /get_server_info at the root."""
    routes = {"/v1/models": (200, SGLANG_MODELS), "/get_server_info": (200, SGLANG_INFO)}
    with serve(routes) as (url, hits):
        cap = discover(url + "/v1/", "k")
    assert (cap.tokens, cap.source, cap.flavor, cap.max_model_len) == (
        SEED_CAPACITY,
        "sglang_server_info",
        "sglang",
        262144,
    )
    assert [p for p, _ in hits] == ["/v1/models", "/get_server_info"]
    assert all(auth == "Bearer k" for _, auth in hits)


LLAMACPP_MODELS = {"object": "list", "data": [{"id": "tiny-llama", "object": "model", "owned_by": "llamacpp",
                                                "meta": {"n_vocab": 8192, "n_ctx": 512, "n_ctx_train": 4096}}]}


def test_llamacpp_props_give_the_slots_and_the_cache_as_per_slot_caches_hold_it():
    """Read from a real llama-server -c 1024 -np 2 (tests/fixtures/llamacpp_props.json)."""
    slots = slots_from_props(json.loads(fixture("llamacpp_props.json")))
    assert (slots.total, slots.per_slot, slots.tokens) == (2, 512, 1024)
    assert slots_from_props({"total_slots": 2}) is None and slots_from_props({}) is None
    assert slots_from_props("not json") is None
    assert slots_from_props({"total_slots": 0, "default_generation_settings": {"n_ctx": 512}}) is None


def test_llamacpp_metrics_are_watched_deferred_requests_as_the_queue():
    """A real llama-server's /metrics with 2 slots busy and 1 request deferred."""
    samples = parse_metrics(fixture("metrics_llamacpp.txt"))
    assert flavor_of(samples) == "llamacpp"
    sample = watch_sample(samples, "llamacpp")
    assert (sample["waiting"], sample["running"]) == (1, 2)
    assert sample["preemptions_total"] is None and sample["kv_usage"] is None  # llama.cpp has neither


def test_discover_llamacpp_reads_its_props_after_the_other_sources():
    routes = {"/v1/models": (200, LLAMACPP_MODELS), "/metrics": (200, fixture("metrics_llamacpp.txt")),
              "/props": (200, fixture("llamacpp_props.json"))}
    with serve(routes) as (url, hits):
        cap = discover(url)
    assert (cap.tokens, cap.source, cap.flavor, cap.max_model_len, cap.slots) == (
        1024, "llamacpp_props", "llamacpp", 512, 2)
    assert "2 slots x 512 tokens of context each" in cap.detail and "--kv-unified" in cap.detail
    assert [p for p, _ in hits] == ["/v1/models", "/get_server_info", "/metrics", "/props"]


def test_props_are_not_asked_of_a_vllm_server():
    routes = {"/v1/models": (200, VLLM_MODELS), "/metrics": (200, "# nothing\n")}
    with serve(routes) as (url, hits):
        cap = discover(url)
    assert cap.tokens is None and cap.slots is None and "/props" not in [p for p, _ in hits]


@pytest.mark.parametrize("name", ["metrics_vllm_old.txt", "metrics_vllm_new.txt"])
def test_discover_vllm_falls_through_404_to_cache_config(name):
    routes = {"/v1/models": (200, VLLM_MODELS), "/metrics": (200, fixture(name))}
    with serve(routes) as (url, _):
        cap = discover(url, timeout_s=2)
    assert (cap.tokens, cap.source, cap.flavor, cap.max_model_len) == (
        SEED_CAPACITY,
        "vllm_cache_config",
        "vllm",
        131072,
    )
    assert "GET /get_server_info: HTTP 404" in cap.detail


def test_discover_sglang_metrics_when_server_info_is_not_json():
    routes = {
        "/get_server_info": (200, "<html>proxy</html>"),
        "/metrics": (200, fixture("metrics_sglang.txt")),
    }
    with serve(routes) as (url, _):
        cap = discover(url, timeout_s=2)
    assert (cap.tokens, cap.source, cap.flavor, cap.max_model_len) == (
        SEED_CAPACITY,
        "sglang_metrics",
        "sglang",
        None,
    )


def test_discover_404_everywhere_says_so():
    with serve({}) as (url, hits):
        cap = discover(url, timeout_s=2)
    assert (cap.tokens, cap.source, cap.flavor) == (None, None, None)
    for path in ("/v1/models", "/get_server_info", "/metrics"):
        assert f"GET {path}: HTTP 404" in cap.detail
    assert len(hits) == 3


def test_discover_metrics_without_capacity_keeps_the_flavor():
    routes = {"/metrics": (200, 'vllm:num_requests_running{engine="0"} 3\n')}
    with serve(routes) as (url, _):
        cap = discover(url, timeout_s=2)
    assert (cap.tokens, cap.flavor) == (None, "vllm")
    assert "no vllm:cache_config_info" in cap.detail



@pytest.mark.timeout(20)
def test_discover_closed_port_gives_up_after_one_refusal():
    cap = discover(f"http://127.0.0.1:{free_port()}", timeout_s=5)
    assert cap.tokens is None and "refused" in cap.detail


@pytest.mark.timeout(20)
def test_discover_silent_server_times_out_per_source():
    with socket.socket() as listener:  # accepts connections (backlog) and never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        cap = discover(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout_s=0.3)
    assert cap.tokens is None and cap.detail.count("timed out") == 3


def test_resolve_scenario_value_wins_and_quotes_the_server():
    routes = {"/v1/models": (200, SGLANG_MODELS), "/get_server_info": (200, SGLANG_INFO)}
    with serve(routes) as (url, _):
        cap = discover(url, configured=1_000_000)
        same = discover(url, configured=SEED_CAPACITY)
        auto = discover(url, configured=None)
    assert (cap.tokens, cap.source, cap.flavor, cap.max_model_len) == (
        1_000_000,
        "scenario",
        "sglang",
        262144,
    )
    assert "server reports 1,570,000 via sglang_server_info" in cap.detail
    assert "server reports" not in same.detail
    assert (auto.tokens, auto.source) == (SEED_CAPACITY, "sglang_server_info")
    offline = discover(f"http://127.0.0.1:{free_port()}", configured=4096)
    assert (offline.tokens, offline.source, offline.flavor) == (4096, "scenario", None)


# ---------------------------------------------------------------- ServerWatch


def vllm_text(preempt: float, waiting: float, running: float = 8, usage: float = 0.5) -> str:
    return (
        f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {preempt}\n'
        f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}\n'
        f'vllm:num_requests_running{{engine="0",model_name="m"}} {running}\n'
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {usage}\n'
    )


class Script:
    """A /metrics route that plays texts in order (the last one repeats)."""

    def __init__(self, texts):
        self.texts, self.i = texts, 0

    def __call__(self):
        text = self.texts[min(self.i, len(self.texts) - 1)]
        self.i += 1
        return (200, text) if text is not None else (500, "boom")


def test_poll_once_feeds_stages_with_a_fake_clock(caplog):
    script = Script(
        [vllm_text(1, 0), vllm_text(1, 0), vllm_text(4, 3, 40, 0.97), None, None, vllm_text(4, 0)]
    )
    now = [0.0]
    with serve({"/metrics": script}) as (url, _):
        watch = ServerWatch(url, None, None, interval_s=1, clock=lambda: now[0])
        assert watch.poll_once()  # baseline
        watch.begin_stage(0)
        with caplog.at_level(logging.WARNING, logger="loadgen.server.watch"):
            for _ in range(5):
                now[0] += 1
                assert watch.poll_once()
        out = watch.end_stage(0)
    assert out["flavor"] == "vllm" and out["preemption_metric"] == "vllm:num_preemptions_total"
    assert (out["polls"], out["poll_errors"], out["preemptions"]) == (3, 2, 3)
    assert (out["waiting_max"], out["running_max"], out["kv_usage_max"]) == (3, 40, 0.97)
    assert out["over_capacity"] is True and out["disabled"] is None and out["watched_s"] == 5
    assert len([r for r in caplog.records if "failed" in r.getMessage()]) == 1  # warned once


@pytest.mark.timeout(30)
def test_watch_greenlet_disables_itself_once_without_metrics(caplog):
    with serve({}) as (url, hits), caplog.at_level(logging.WARNING, logger="loadgen.server.watch"):
        watch = ServerWatch(url, None, "sglang", interval_s=0.01).start()
        watch.begin_stage(0)
        gevent.sleep(0.3)
        out = watch.end_stage(0)
        watch.stop()
    assert len(hits) == 1 and "HTTP 404" in out["disabled"]
    assert out["over_capacity"] is None and out["polls"] == 0
    assert len(caplog.records) == 1 and "server watch off" in caplog.records[0].getMessage()


@pytest.mark.timeout(30)
def test_watch_greenlet_sees_sglang_retractions():
    retracted = fixture("metrics_sglang.txt")
    script = Script([retracted] * 3 + [retracted.replace("} 5.0\n", "} 9.0\n")])
    with serve({"/metrics": script}) as (url, _):
        watch = ServerWatch(url, None, None, interval_s=0.01)
        polls_begun = []  # counted where a poll starts: the server counts a poll only once it is
        poll_once = watch.poll_once  # answered, which may be after stop() (one already in flight)
        watch.poll_once = lambda: polls_begun.append(1) or poll_once()
        watch.start()
        for _ in range(500):  # until the baseline poll happened (bounded: ~5 s)
            if script.i:
                break
            gevent.sleep(0.01)
        watch.begin_stage(0)
        for _ in range(500):
            if script.i >= 6:
                break
            gevent.sleep(0.01)
        out = watch.end_stage(0)
        watch.stop()
        begun_at_stop = len(polls_begun)
        gevent.sleep(0.1)
    assert len(polls_begun) == begun_at_stop  # stop() ended the greenlet: no poll began after it
    assert out["flavor"] == "sglang" and out["preemption_metric"] == "sglang:num_retracted_requests_total"
    assert out["preemptions"] == 4 and out["over_capacity"] is True and out["kv_usage_max"] == 0.82


WATCH_UNDER_MONKEY_PATCH = """
from gevent import monkey; monkey.patch_all()
import gevent, sys
from gevent.pywsgi import WSGIServer
sys.path.insert(0, sys.argv[1])
from loadgen.server.watch import ServerWatch

def app(environ, start_response):  # a slow /metrics, answered in the same process and hub
    gevent.sleep(0.2)
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b'sglang:num_queue_reqs{tp_rank="0"} 2\\nsglang:num_running_reqs{tp_rank="0"} 5\\n']

server = WSGIServer(("127.0.0.1", 0), app, log=None)
server.start()
ticks = []
ticker = gevent.spawn(lambda: [ticks.append(gevent.sleep(0.01)) for _ in range(1000)])
watch = ServerWatch(f"http://127.0.0.1:{server.server_port}", None, None, interval_s=0.01)
watch.begin_stage(0)
watch.start()
gevent.sleep(1.0)
out = watch.end_stage(0)
watch.stop(); ticker.kill(); server.stop()
print(out["polls"], len(ticks), out["over_capacity"], out["waiting_max"])
"""


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_watch_cooperates_with_gevent_when_sockets_are_patched():
    """Inside locust the poller shares the hub with the users: a slow /metrics must not block it."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(WATCH_UNDER_MONKEY_PATCH), str(Path(__file__).resolve().parents[2])],
        capture_output=True,
        text=True,
        timeout=45,
    )
    assert proc.returncode == 0, proc.stderr
    polls, ticks, over, waiting = proc.stdout.split()
    # while the poller waited ~0.2 s per answer, the ticker kept running (a blocked hub would leave
    # it near zero); the server answered from the same hub, which also proves the GET yields
    assert int(polls) >= 2 and int(ticks) > 10 * int(polls)
    assert over == "True" and float(waiting) == 2


# -- open loop: Little's law --------------------------------------------------------------------------
from loadgen.run.kv_guard import decide_rate  # noqa: E402


def test_rate_guard_projects_littles_law_and_acts():
    # 2 req/s x 100 s = 200 in flight x 2000 tokens = 400,000 <= 400,000: fits exactly
    ok = decide_rate(2.0, 100.0, 400_000, 1000, 1000, 0.0, "abort")
    assert ok.allowed and not ok.breach and ok.projected_tokens == pytest.approx(400_000)
    over = decide_rate(4.0, 100.0, 400_000, 1000, 1000, 0.0, "abort")
    assert not over.allowed and over.breach and "rates up to 2 req/s" in over.message
    clamp = decide_rate(4.0, 120.0, 400_000, 1000, 1000, 0.1, "clamp")
    assert clamp.allowed and clamp.run_concurrency == 1.51  # 400000 / (120 x 2000 x 1.1) = 1.515..
    assert clamp.run_concurrency * 120 * 2000 * 1.1 <= 400_000
    warn = decide_rate(4.0, 100.0, 400_000, 1000, 1000, 0.0, "warn")
    assert warn.allowed and warn.breach and warn.run_concurrency == 4.0


def test_rate_guard_off_without_capacity_or_duration():
    assert decide_rate(8.0, None, 400_000, 1000, 1000, 0.0, "abort").allowed
    d = decide_rate(8.0, 10.0, None, 1000, 1000, 0.0, "abort")
    assert d.allowed and not d.breach and "capacity unknown" in d.message


def test_the_summary_s_kv_ceiling_is_the_last_stage_the_guard_lets_run_for_a_mix_of_lengths():
    """summary.json's guard.max_concurrency projects as the guard's stage decisions do: with output
    lengths drawn from a distribution, per request = the mix's figure at C, not input + output."""
    from types import SimpleNamespace

    from loadgen.config import build_scenario
    from loadgen.run.results import kv_ceiling
    from loadgen.workload.mix import scenario_mix

    sc = build_scenario({"input_tokens": 1000, "output": {"dist": "uniform", "min": 100, "max": 1900}})
    mix = scenario_mix(sc)
    c = kv_ceiling(SimpleNamespace(tokens=1_570_000), sc)
    assert decide(c, 1_570_000, *mix.split(c), sc.guard.margin, "abort").allowed
    assert not decide(c + 1, 1_570_000, *mix.split(c + 1), sc.guard.margin, "abort").allowed
    assert kv_ceiling(SimpleNamespace(tokens=1_570_000), build_scenario({})) == 785  # 1000 + 1000, the demo's
