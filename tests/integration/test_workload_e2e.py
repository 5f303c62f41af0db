"""Workloads end to end on the simulator (which honours lengths): a dataset of known lengths is
sent as written, a length distribution is drawn per request, bad datasets stop at the start."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from loadgen.sim.launch import running_sim
from tests.support.raw_client import request
from tests.support.runlocust import run_locust

pytestmark = pytest.mark.integration

FAST_SIM = ("--preset", "fixed", "--ttft-ms", "2", "--itl-ms", "1")
# C=8 on FAST_SIM: some 200 requests/s, 600 in the 3 s window
RUN = ("--scenario", "config/smoke.yaml", "--set", "guard.watch=false", "--stages", "8", "--warmup", "1",
       "--stage-duration", "3")
INPUTS = [32, 64, 96, 128, 160, 192, 224, 256]
OUTPUTS = [8, 16, 24, 32, 40, 48, 56, 64]


def _write(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_dataset_lengths_sent_as_written(tmp_path):
    rows = [{"input_tokens": i, "output_tokens": o} for i, o in zip(INPUTS, OUTPUTS, strict=True)]
    data = _write(tmp_path / "known.jsonl", rows)
    with running_sim(*FAST_SIM) as sim:
        run = run_locust(sim.url, tmp_path / "r", *RUN, "--dataset", data, "--dataset-order", "shuffled")
    assert run.code == 0, run.stderr[-3000:]
    (stage,) = run.summary["stages"]
    n = stage["requests"]
    assert n > 300, stage  # many cycles of the 8 lines: a partial cycle moves the mean < 1%
    assert stage["input_tokens"] / n == pytest.approx(sum(INPUTS) / 8, rel=0.01)
    assert stage["output_tokens"] / n == pytest.approx(sum(OUTPUTS) / 8, rel=0.01)
    assert stage["token_mismatch"] == {"input": 0, "output": 0, "estimated": 0}
    assert 32 * 0.98 <= stage["input_len_p50_tokens"] and stage["input_len_p99_tokens"] <= 256 * 1.02


def test_uniform_lengths_drawn_per_request(tmp_path):
    with running_sim(*FAST_SIM) as sim:
        run = run_locust(sim.url, tmp_path / "r", *RUN, "--input-dist", "uniform", "--input-min", "20",
                         "--input-max", "400", "--output-dist", "uniform", "--output-min", "4", "--output-max", "60")
    assert run.code == 0, run.stderr[-3000:]
    (stage,) = run.summary["stages"]
    n = stage["requests"]
    assert stage["token_mismatch"] == {"input": 0, "output": 0, "estimated": 0}  # each its own expectation
    assert stage["input_tokens"] / n == pytest.approx(210, rel=0.06)
    assert stage["output_tokens"] / n == pytest.approx(32, rel=0.06)
    assert stage["input_len_p50_tokens"] == pytest.approx(210, rel=0.12)
    assert stage["input_len_p99_tokens"] > 350


def test_bad_dataset_lines_exit_2_with_the_first_few(tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_text('{"input_tokens": 10}\n{"input_tokens": -1}\nnot json\n{"prompt": "x", "input_tokens": 3}\n')
    run = run_locust("http://127.0.0.1:9", tmp_path / "r", *RUN, "--dataset", str(data), timeout_s=60)
    assert run.code == 2
    lines = [ln for ln in run.stderr.splitlines() if "config error" in ln]
    assert len(lines) == 3 and "3 bad line(s)" in lines[0]
    assert f"{data}:2:" in lines[0] and f"{data}:3:" in lines[1] and f"{data}:4:" in lines[2]


def test_dataset_longer_than_the_context_is_refused_at_start(tmp_path):
    data = _write(tmp_path / "long.jsonl", [{"input_tokens": 100, "output_tokens": 10},
                                            {"input_tokens": 5000, "output_tokens": 10},
                                            {"input_tokens": 3000, "output_tokens": 10}])
    with running_sim(*FAST_SIM, "--max-model-len", "2048") as sim:
        run = run_locust(sim.url, tmp_path / "r", *RUN, "--dataset", data, timeout_s=60)
    assert run.code == 2, run.stderr[-2000:]
    assert "2 of 3 requests" in run.stderr and "line 2, 5,010 tokens" in run.stderr


def _turn_ttfts(tmp_path, name: str, *sim_args: str) -> list[float]:
    engine = ("--timing", "engine", "--step-base-ms", "1", "--step-per-prefill-token-us", "200",
              "--prefill-chunk-tokens", "100000", *sim_args)
    with running_sim(*engine) as sim:
        run = run_locust(sim.url, tmp_path / name, *RUN, "--stages", "1", "--turns", "4", "--input-tokens", "200",
                         "--output-tokens", "16")
    assert run.code == 0, run.stderr[-3000:]
    (stage,) = run.summary["stages"]
    assert stage["token_mismatch"] == {"input": 0, "output": 0, "estimated": 0}  # the history's length exact
    assert len(stage["requests_by_turn"]) == 4 and min(stage["requests_by_turn"]) >= 3, stage
    return stage["ttft_p50_s_by_turn"]


def test_multi_turn_ttft_by_turn_shows_the_prefix_cache(tmp_path):
    with ThreadPoolExecutor(2) as pool:  # two light runs at once (one user each, 6-12 conversations)
        plain_run = pool.submit(_turn_ttfts, tmp_path, "plain")
        cached_run = pool.submit(_turn_ttfts, tmp_path, "cached", "--prefix-cache-tokens", "100000",
                                 "--prefix-block-tokens", "16")
        plain, cached = plain_run.result(), cached_run.result()
    # without a cache turn 3 prefills its whole history (3 x 216 + 200 tokens at 200 us each)
    assert plain[3] > 2.5 * plain[0]
    # with one, only what is new since the last turn: no growth, and far below the uncached turn
    assert cached[3] < 1.5 * cached[0] and cached[3] < 0.5 * plain[3]


BOUND_S = 0.05  # client_check.lateness_p99_s_max for the trace test


def test_trace_replays_on_its_schedule_with_shared_prefixes(tmp_path):
    sim_args = ("--timing", "engine", "--step-base-ms", "1", "--prefix-cache-tokens", "200000",
                "--prefix-block-tokens", "16")
    with running_sim(*sim_args) as sim:
        run = run_locust(sim.url, tmp_path / "r", "--scenario", "config/smoke.yaml", "--set", "guard.watch=false",
                         "--dataset", "config/datasets/mooncake-trace.jsonl", "--trace-speedup", "4",
                         "--warmup", "1", "--stage-duration", "5", "--set", f"client_check.lateness_p99_s_max={BOUND_S}")
        metrics = request(sim.url, "GET", "/metrics").body.decode()
    assert run.code == 0, run.stderr[-3000:]
    (stage,) = run.summary["stages"]
    period_s = (3.0 + 3.0 / 9) / 4  # (span + mean gap) / speedup
    assert stage["offered_rate_per_s"] == pytest.approx(10 / period_s, rel=1e-6)
    assert stage["scheduled_rate_per_s"] == pytest.approx(10 / period_s, rel=0.25)  # 5 s of a 0.83 s cycle
    # within the lateness bound (loose: the test machine is shared; `make bench` measures lateness),
    # so the schedule did not slip; a client_bound flag may still come from the client's CPU or
    # loop lag, which judge the machine (a busy one: loop lag p99 over 20 ms), not the replay
    assert stage["lateness_p99_s"] < BOUND_S
    client = stage["client"]
    assert ("client_bound" in stage["flags"]) == (client["cpu_percent"] >= 90 or client["loop_lag_p99_s"] >= 0.02), client
    assert stage["dropped_by_client"] == 0 and stage["token_mismatch"]["input"] == 0
    hits = [ln for ln in metrics.splitlines() if ln.startswith("vllm:prefix_cache_hits")]
    assert hits and float(hits[0].split()[-1]) > 0, metrics[:2000]  # hash_ids became shared prefixes


def test_a_trace_on_chat_shares_its_prefixes_as_words(tmp_path):
    """The same trace on /v1/chat/completions: hash_ids become shared blocks of one-token words
    (loadgen.workload.asks PromptMaker.hashed), so the server's prefix cache hits most prompt tokens
    (each line after the first shares at least its 2 leading 512-token blocks); random text would
    share none."""
    sim_args = ("--timing", "engine", "--step-base-ms", "1", "--prefix-cache-tokens", "200000",
                "--prefix-block-tokens", "16")
    with running_sim(*sim_args) as sim:
        run = run_locust(sim.url, tmp_path / "r", "--scenario", "config/smoke.yaml", "--set", "guard.watch=false",
                         "--endpoint", "chat", "--dataset", "config/datasets/mooncake-trace.jsonl",
                         "--trace-speedup", "4", "--warmup", "1", "--stage-duration", "3")
        metrics = request(sim.url, "GET", "/metrics").body.decode()
    assert run.code == 0, run.stderr[-3000:]
    (stage,) = run.summary["stages"]
    assert stage["error_count"] == 0 and stage["token_mismatch"]["input"] == 0  # calibrated: exact lengths
    counters = {ln.split("{")[0]: float(ln.split()[-1]) for ln in metrics.splitlines()
                if ln.startswith(("vllm:prefix_cache_hits", "vllm:prefix_cache_queries"))}
    # 93 % here (shared text: 0 %)
    assert counters["vllm:prefix_cache_hits_total"] > 0.5 * counters["vllm:prefix_cache_queries_total"], counters
