"""The sweep end to end on the engine simulator: the seeds' guard stop, throughput against the
server's own token counters, the live watch's over-capacity flag, chat prompt calibration."""

from __future__ import annotations

import pytest

from loadgen.errors import EXIT_GUARD_ABORT
from loadgen.sim.launch import running_sim
from tests.support.runlocust import run_locust

pytestmark = pytest.mark.integration


def test_seeds_guard_runs_512_refuses_1024_exit_3_and_keeps_every_stage(tmp_path):
    """Capacity discovered from the SGLang-flavored server: 1,570,000 tokens.

    Input + output = 2000 tokens per request as in the seeds (1900 + 100 here, so requests are
    short): C=512 projects 1,024,000 tokens and runs; C=1024 projects 2,048,000 and is refused.
    """
    with running_sim("--preset", "qwen35-397b-8gpu", "--time-scale", "20") as sim:
        run = run_locust(sim.url, tmp_path / "seeds", "--scenario", "config/smoke.yaml",
                         "--input-tokens", "1900", "--output-tokens", "100", "--stages", "256,512,1024",
                         "--warmup", "1", "--stage-duration", "1")  # each window lasts C requests (turnover)
    assert run.code == EXIT_GUARD_ABORT, run.stderr[-3000:]
    s = run.summary
    assert s["guard"]["capacity_tokens"] == 1_570_000
    assert s["guard"]["capacity_source"] == "sglang_server_info"
    assert s["guard"]["stopped_before"] == 1024
    assert s["run"]["stop_reason"] == "guard_abort" and s["run"]["exit_code"] == EXIT_GUARD_ABORT
    assert [st["concurrency"] for st in s["stages"]] == [256, 512]
    assert all(st["requests"] > 0 for st in s["stages"])
    assert "2,048,000" in run.stderr and "1,570,000" in run.stderr


def test_stage_throughput_matches_the_servers_token_counter_over_the_window(tmp_path):
    with running_sim("--preset", "qwen35-397b-8gpu", "--time-scale", "10") as sim:
        run = run_locust(sim.url, tmp_path / "tput", "--scenario", "config/smoke.yaml",
                         "--input-tokens", "200", "--output-tokens", "200", "--stages", "4,16",
                         "--warmup", "1", "--stage-duration", "2")
    assert run.code == 0, run.stderr[-3000:]
    stages = run.summary["stages"]
    assert [st["concurrency"] for st in stages] == [4, 16]
    assert [st["users"] for st in stages] == [4, 16]
    for st in stages:
        server = st["server"]
        assert server["output_tokens_per_s"], server
        assert st["output_tokens_per_s"] == pytest.approx(server["output_tokens_per_s"], rel=0.05)
    assert stages[1]["output_tokens_per_s"] > 2 * stages[0]["output_tokens_per_s"]


@pytest.fixture(scope="module")
def over_capacity_run(tmp_path_factory):
    """A small vLLM-flavored server (131,072 KV tokens) that preempts from about C=110 with 1000 +
    200 tokens a request (128 x 1200 = 153,600); the guard is told to warn, so the over-capacity
    stage runs and the watch sees the preemptions, and to abort after a stage the server was over
    capacity in, so C=256 never runs. Up to C=128's window the load is the same with or without
    ``abort_on_over_capacity`` (it acts only once that window has closed): one run serves the watch
    test and the abort test. (That a flag alone leaves the run's exit code 0 is pinned by
    tests/integration/test_first_day.py's preempting server.) A poll every 0.1 s: ~10 in a 1 s window (C=128's
    lasts ~2 s, until 128 requests finished in it), so the queue rule (in half the polls) does not
    fire on C=8's odd queued request (~6 % of polls)."""
    with running_sim("--preset", "llama8b-1gpu-vllm", "--time-scale", "5") as sim:
        return run_locust(sim.url, tmp_path_factory.mktemp("overcap") / "res", "--scenario", "config/smoke.yaml",
                          "--input-tokens", "1000", "--output-tokens", "200", "--stages", "8,128,256",
                          "--warmup", "1", "--stage-duration", "1", "--guard-action", "warn",
                          "--set", "guard.watch_interval_s=0.1", "--set", "guard.abort_on_over_capacity=true",
                          "--set", "stages.drain_s=5")


def test_live_watch_flags_a_stage_where_the_server_preempts(over_capacity_run):
    stages = over_capacity_run.summary["stages"]
    assert [st["concurrency"] for st in stages] == [8, 128], over_capacity_run.stderr[-3000:]
    low, high = stages
    assert low["server"]["polls"] >= 5 and high["server"]["polls"] >= 2, (low["server"], high["server"])
    assert "server_over_capacity" not in low["flags"]
    assert "server_over_capacity" in high["flags"] and "guard_warn" in high["flags"]
    assert high["server"]["preemptions"] > 0 or high["server"]["queued_polls_max"] >= 2


def test_abort_on_over_capacity_stops_after_the_stage_that_preempted(over_capacity_run):
    run = over_capacity_run
    assert run.code == EXIT_GUARD_ABORT, run.stderr[-3000:]
    s = run.summary
    assert s["run"]["stop_reason"] == "server_over_capacity"
    assert [st["concurrency"] for st in s["stages"]] == [8, 128]
    assert "server_over_capacity" in s["stages"][1]["flags"]


def test_chat_prompts_are_calibrated_to_exactly_n_input_tokens(tmp_path):
    with running_sim("--preset", "fixed", "--ttft-ms", "20", "--itl-ms", "5") as sim:
        run = run_locust(sim.url, tmp_path / "chat", "--scenario", "config/smoke.yaml",
                         "--endpoint", "chat", "--input-tokens", "300", "--stages", "2",
                         "--stage-duration", "1")
    assert run.code == 0, run.stderr[-3000:]
    (st,) = run.summary["stages"]
    assert st["requests"] > 0
    assert st["token_mismatch"] == {"input": 0, "output": 0, "estimated": 0}
    assert st["input_tokens"] == 300 * st["requests"]


def test_prompt_plus_output_beyond_max_model_len_stops_at_start_with_one_line(tmp_path):
    with running_sim("--preset", "fixed", "--max-model-len", "1000") as sim:
        run = run_locust(sim.url, tmp_path / "mml", "--scenario", "config/smoke.yaml",
                         "--input-tokens", "900", "--output-tokens", "200")
    assert run.code == 2, run.stderr[-2000:]
    assert "1,100 exceeds the server's max_model_len 1,000" in run.stderr
    assert run.summary["stages"] == [] and run.summary["run"]["stop_reason"] == "error"
