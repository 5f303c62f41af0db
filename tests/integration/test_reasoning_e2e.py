"""Known answers end to end (simulator -> real locust run -> summary.json) for a reasoning model
(loadgen.stats.answer, loadgen.stats.metrics): latencies against the simulator's fixed timing, so
alone. Speculative decoding and the prefix cache, whose answers are counts, are in
tests/integration/test_spec_cache_e2e.py."""

from __future__ import annotations

import pytest

from loadgen.sim.launch import running_sim
from tests.support.runlocust import run_locust

pytestmark = [pytest.mark.integration, pytest.mark.solo]  # timed against a known answer: alone

R, ITL_S, OUT = 20, 0.020, 40
CHAT_RUN = ("--scenario", "config/smoke.yaml", "--set", "guard.watch=false", "--endpoint", "chat",
            "--input-tokens", "32", "--output-tokens", str(OUT), "--warmup", "1", "--stage-duration", "3")


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
