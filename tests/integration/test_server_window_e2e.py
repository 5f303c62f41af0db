"""Known answers for the server's own figures over a stage's window (loadgen/server/window_spec.py):
the simulator with a fixed speculative accept distribution and a prefix cache -> a real locust
run with the server watch on -> the stage's ``server`` object in summary.json."""

from __future__ import annotations

import csv

import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.sim.launch import running_sim
from tests.support.raw_client import request
from tests.support.runlocust import run_locust

pytestmark = pytest.mark.integration  # counts, not timings (seeded accept draws): runs beside other files

ACCEPT = ("--timing", "engine", "--spec-accept", "0.2,0.3,0.5", "--time-scale", "5", "--seed", "7")
MEAN_ACCEPT = 0.2 * 1 + 0.3 * 2 + 0.5 * 3  # 2.3 tokens a verify step
RUN = ("--scenario", "config/smoke.yaml", "--input-tokens", "32", "--output-tokens", "400", "--stages", "8",
       "--warmup", "1", "--stage-duration", "3", "--set", "guard.watch_interval_s=0.5")


def server_counters(url: str) -> dict[str, float]:
    text = request(url, "GET", "/metrics").body.decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


def spec_stage(tmp_path, flavor: str) -> tuple[dict, dict, str, dict]:
    with running_sim(*ACCEPT, "--flavor", flavor) as sim:
        run = run_locust(sim.url, tmp_path / flavor, *RUN)
        counters = server_counters(sim.url)
    assert run.code == 0, run.stderr[-3000:]
    (stage,) = run.summary["stages"]
    assert stage["error_count"] == 0 and stage["output_tokens"] == 400 * stage["requests"]
    with open(run.run_dir / "stages.csv", newline="") as f:
        (row,) = csv.DictReader(f)
    return stage, counters, run.stdout + run.stderr, row


def test_vllm_accept_length_over_the_window_is_the_accept_mean_and_the_clients_tokens_per_chunk(tmp_path):
    """2.3 tokens a step: the server's counters over the window say 1 + accepted / drafts = 2.3 and
    accepted / draft tokens = 1.3 / 2 = 0.65; the client sees the same accepted tokens per chunk
    (400 / (1 + 399 / 2.3) = 2.29: the first chunk is the prefill's one token). Thousands of
    steps make the sampling error < 1 %."""
    s, c, out, row = spec_stage(tmp_path, "vllm")
    server = s["server"]
    assert server["spec_source"] == "counters" and server["spec_drafts"] > 2000, server
    assert server["spec_accept_length"] == pytest.approx(MEAN_ACCEPT, rel=0.03)
    assert server["spec_acceptance_rate"] == pytest.approx((MEAN_ACCEPT - 1) / 2, rel=0.03)
    assert server["spec_accept_length"] == pytest.approx(s["tokens_per_chunk"], rel=0.03)
    # the window is a part of the run: its accept length agrees with the run-long counters
    whole = 1 + c["vllm:spec_decode_num_accepted_tokens_total"] / c["vllm:spec_decode_num_drafts_total"]
    assert server["spec_accept_length"] == pytest.approx(whole, rel=0.03)
    assert server["spec_drafts"] < c["vllm:spec_decode_num_drafts_total"]  # the window, not the run
    assert f"server accept length {server['spec_accept_length']:.2f}" in out, out[-2000:]
    assert float(row["server.spec_accept_length"]) == server["spec_accept_length"]  # stages.csv too
    assert row["server.spec_source"] == "counters" and row["server.prefix_cache_hit_rate"] == ""


def test_sglang_accept_length_is_its_gauge_at_the_windows_close(tmp_path):
    s, _, out, row = spec_stage(tmp_path, "sglang")
    server = s["server"]
    assert server["spec_source"] == "gauge_at_close" and server["spec_drafts"] is None
    assert server["spec_accept_length"] == pytest.approx(MEAN_ACCEPT, rel=0.03)
    assert server["spec_accept_length"] == pytest.approx(s["tokens_per_chunk"], rel=0.03)
    assert "(gauge at the window's close)" in out
    assert row["server.spec_source"] == "gauge_at_close"


def test_vllm_prefix_cache_hit_rate_over_the_window_agrees_with_the_clients_cached_share(tmp_path):
    """Multi-turn chat resends the history: the server's hits / queries over the window and the
    usage-reported cached share of the stage's requests count the same cache (the window's edges
    and the stage's requests differ by the requests in flight at the edges: within 5 %)."""
    engine = ("--timing", "engine", "--step-base-ms", "1", "--prefix-cache-tokens", "100000",
              "--prefix-block-tokens", "16")
    with running_sim(*engine) as sim:
        run = run_locust(sim.url, tmp_path / "turns", "--scenario", "config/smoke.yaml", "--endpoint", "chat",
                         "--input-tokens", "32", "--output-tokens", "20", "--stages", "2", "--turns", "4",
                         "--warmup", "1", "--stage-duration", "3")
        c = server_counters(sim.url)
    assert run.code == 0, run.stderr[-3000:]
    (s,) = run.summary["stages"]
    server = s["server"]
    assert server["prefix_cache_source"] == "counters"
    assert 0 < server["prefix_cache_hit_tokens"] < c["vllm:prefix_cache_hits_total"]
    assert 0.3 < s["cached_share"] < 1
    assert server["prefix_cache_hit_rate"] == pytest.approx(s["cached_share"], rel=0.05)
    # the stage's reported cached tokens and the server's window count are the same order
    assert server["prefix_cache_hit_tokens"] == pytest.approx(s["cached_prompt_tokens"], rel=0.1)
