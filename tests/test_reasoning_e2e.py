"""Known answers end to end (simulator -> real locust run -> summary.json) for a reasoning model,
speculative decoding and a prefix cache (loadgen.stats.answer, loadgen.stats.metrics)."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.server.text_calibration import FIT_WORDS
from loadgen.sim.launch import running_sim
from loadgen.sim.raw_client import request
from tests.runlocust import run_locust

pytestmark = [pytest.mark.integration, pytest.mark.solo]  # timed against a known answer: alone

R, ITL_S, OUT = 20, 0.020, 40
CHAT_RUN = ("--scenario", "config/smoke.yaml", "--set", "guard.watch=false", "--endpoint", "chat",
            "--input-tokens", "32", "--output-tokens", str(OUT), "--warmup", "1", "--stage-duration", "3")


def server_counters(url: str) -> dict[str, float]:
    text = request(url, "GET", "/metrics").body.decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


def _reasoning_stage(tmp_path, name: str, *sim_args: str, run_args: tuple = ()) -> tuple[dict, str]:
    with running_sim("--preset", "fixed", "--ttft-ms", "200", "--itl-ms", str(ITL_S * 1000),
                     "--reasoning-tokens", str(R), *sim_args) as sim:
        run = run_locust(sim.url, tmp_path / name, *CHAT_RUN, "--stages", "6", *run_args)
    assert run.code == 0, run.stderr[-3000:]
    (stage,) = run.summary["stages"]
    assert stage["requests"] >= 6 and stage["error_count"] == 0
    assert stage["token_mismatch"] == {"input": 0, "output": 0, "estimated": 0}
    return stage, run.stdout + run.stderr


@pytest.mark.parametrize(("spelling", "usage", "source"), [
    ("reasoning_content", "1", "usage"),  # SGLang-style, reasoning_tokens in usage
    ("reasoning", "0", "stream"),  # vLLM >= 0.19.1 spelling, no usage detail: counted from the stream
])
def test_time_to_first_answer_token_is_r_tokens_after_ttft(tmp_path, spelling, usage, source):
    """The first R = 20 tokens are thinking at a fixed 20 ms per token: the first answer token comes
    R x ITL = 400 ms after the first token, whatever the delta's spelling."""
    s, out = _reasoning_stage(tmp_path, spelling, "--reasoning-field", spelling, "--reasoning-usage", usage)
    assert s["ttft_p50_s"] == pytest.approx(0.200, rel=0.05)  # the first thinking token
    assert s["ttfat_p50_s"] - s["ttft_p50_s"] == pytest.approx(R * ITL_S, rel=0.05)
    assert s["reasoning_tokens_per_request"] == R and s["reasoning_tokens_source"] == source
    assert s["answer_decode_tps_p50"] == pytest.approx(1 / ITL_S, rel=0.05)
    assert s["tokens_per_chunk"] == 1.0
    assert f"{R}.0 reasoning tokens/request ({source})" in out, out[-2000:]  # the console line


def test_thinking_off_makes_a_plain_stage(tmp_path):
    """request.thinking=false is sent as chat_template_kwargs.enable_thinking: the server does not
    think, and the stage shows no reasoning figure (None, not 0 or a copy of TTFT)."""
    s, out = _reasoning_stage(tmp_path, "off", run_args=("--set", "request.thinking=false"))
    assert s["ttft_p50_s"] == pytest.approx(0.200, rel=0.05)
    assert s["ttfat_p50_s"] is None and s["reasoning_tokens_per_request"] is None
    assert "reasoning_tokens" not in s and "reasoning tokens/request" not in out


def test_tokens_per_chunk_is_the_mean_accept_length(tmp_path):
    """Speculative decoding with P(1, 2, 3 tokens a step) = 0.2, 0.3, 0.5 (mean 2.3): 400-token
    outputs come in chunks of 2.3 tokens but the first (the prefill step's one token), 400 / (1 +
    399 / 2.3) = 2.29; thousands of chunks make the sampling error < 1 %."""
    spec = ("--timing", "engine", "--spec-accept", "0.2,0.3,0.5", "--time-scale", "5", "--seed", "7")
    with running_sim(*spec) as sim:
        run = run_locust(sim.url, tmp_path / "spec", "--scenario", "config/smoke.yaml", "--set", "guard.watch=false",
                         "--input-tokens", "32", "--output-tokens", "400", "--stages", "8", "--warmup", "1",
                         "--stage-duration", "3")
        c = server_counters(sim.url)
    assert run.code == 0, run.stderr[-3000:]
    (s,) = run.summary["stages"]
    assert s["error_count"] == 0 and s["output_tokens"] == 400 * s["requests"]
    chunks = s["output_tokens"] / s["tokens_per_chunk"]
    assert chunks > 2000, s  # enough draws for the bound below
    assert s["tokens_per_chunk"] == pytest.approx(2.3, rel=0.03)
    assert f"{s['tokens_per_chunk']:.2f} tokens/chunk" in run.stdout + run.stderr
    # the server's own counters say the same accept length (vLLM: 1 + accepted / drafts)
    accept = 1 + c["vllm:spec_decode_num_accepted_tokens_total"] / c["vllm:spec_decode_num_drafts_total"]
    assert accept == pytest.approx(2.3, rel=0.03)


def test_multi_turn_cached_share_is_the_servers_prefix_cache_count(tmp_path):
    """Every request's usage.prompt_tokens_details.cached_tokens is what the simulator's prefix
    cache found at its admission, so the run's totals (every request, the start probe and warmup
    too; the drain lets the last ones finish) equal the cache's counters exactly."""
    engine = ("--timing", "engine", "--step-base-ms", "1", "--prefix-cache-tokens", "100000",
              "--prefix-block-tokens", "16")
    with running_sim(*engine) as sim:
        run = run_locust(sim.url, tmp_path / "turns", *CHAT_RUN, "--stages", "2", "--turns", "4")
        c = server_counters(sim.url)
    assert run.code == 0, run.stderr[-3000:]
    cache = run.summary["totals"]["prompt_cache"]
    assert cache["cached_prompt_tokens"] == c["vllm:prefix_cache_hits_total"] > 0
    # plus the text calibration's two probes (one token a word, not streamed, not in the totals)
    assert cache["reported_prompt_tokens"] + sum(FIT_WORDS) == c["vllm:prefix_cache_queries_total"]
    (s,) = run.summary["stages"]
    assert 0.3 < s["cached_share"] < 1 and s["cached_prompt_tokens"] > 0  # later turns resend history
    assert "reported no cached prompt tokens" not in run.stdout


def test_shared_prefixes_without_the_servers_report_warn_how_to_turn_it_on(tmp_path):
    with running_sim("--preset", "fixed", "--ttft-ms", "2", "--itl-ms", "1") as sim:  # no cache detail
        run = run_locust(sim.url, tmp_path / "nocache", *CHAT_RUN, "--stages", "2", "--turns", "2")
    assert run.code == 0, run.stderr[-3000:]
    (s,) = run.summary["stages"]
    assert s["cached_share"] is None and s["cached_prompt_tokens"] is None
    out = run.stdout + run.stderr
    assert "reported no cached prompt tokens" in out and "--enable-prompt-tokens-details" in out, out[-2000:]
