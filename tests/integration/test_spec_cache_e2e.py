"""Known answers end to end for speculative decoding and a prefix cache (simulator -> real locust
run -> summary.json and the simulator's own counters; loadgen.stats.metrics).

Every answer here is a count (tokens per chunk, cached prompt tokens, a warning), not a time: a busy
machine slows the run but cannot change a count, so this file runs beside others. The reasoning
model's latencies, timed against the simulator's fixed ITL, are in tests/integration/test_reasoning_e2e.py (solo).
"""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.server.text_calibration import FIT_WORDS
from loadgen.sim.launch import running_sim
from tests.integration.test_reasoning_e2e import CHAT_RUN
from tests.support.raw_client import request
from tests.support.runlocust import run_locust

pytestmark = pytest.mark.integration


def server_counters(url: str) -> dict[str, float]:
    text = request(url, "GET", "/metrics").body.decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


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
