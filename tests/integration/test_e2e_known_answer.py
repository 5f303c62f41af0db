"""Known answer, end to end: simulator with fixed TTFT/ITL -> real locust run -> summary.json."""

from __future__ import annotations

import pytest

from loadgen.sim.launch import running_sim
from tests.support.runlocust import run_locust

pytestmark = [pytest.mark.integration, pytest.mark.solo]  # timed against a known answer: alone

# 4 users, 0.2 + 99 x 0.02 = 2.2 s a request: a 4 s window sends ~8 requests (TTFT p50: every one is
# the fixed 200 ms plus the client's own few ms) and ~790 token gaps (the ITL p50)
SHORT = ("--input-tokens", "64", "--output-tokens", "100", "--warmup", "1", "--stage-duration", "4")


def _stage(tmp_path, tokens_per_chunk: int, concurrency: int = 4) -> dict:
    with running_sim("--preset", "fixed", "--ttft-ms", "200", "--itl-ms", "20",
                     "--tokens-per-chunk", str(tokens_per_chunk)) as sim:
        run = run_locust(sim.url, tmp_path / f"tpc{tokens_per_chunk}", "--scenario", "config/smoke.yaml",
                         *SHORT, "--stages", str(concurrency))
    assert run.code == 0, run.stderr[-3000:]
    (stage,) = run.summary["stages"]
    return stage


def test_ttft_and_per_token_itl_within_5_percent_and_tokens_counted_exactly(tmp_path):
    s = _stage(tmp_path, tokens_per_chunk=1)
    assert s["requests"] >= 4 and s["error_count"] == 0
    assert s["ttft_p50_s"] == pytest.approx(0.200, rel=0.05)
    assert s["itl_p50_s"] == pytest.approx(0.020, rel=0.05)
    assert s["output_tokens"] == 100 * s["requests"]
    assert s["token_mismatch"] == {"input": 0, "output": 0, "estimated": 0}


def test_multi_token_chunks_per_token_itl_vs_per_chunk_gap(tmp_path):
    s = _stage(tmp_path, tokens_per_chunk=4)
    assert s["itl_p50_s"] == pytest.approx(0.020, rel=0.05)
    assert s["itl_chunk_p50_s"] == pytest.approx(0.080, rel=0.05)
    assert s["output_tokens"] == 100 * s["requests"]
