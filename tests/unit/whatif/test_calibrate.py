"""Calibration: the engine's parameters recovered from stage rows the engine itself produced."""

from __future__ import annotations

import dataclasses

import pytest

from loadgen.engine_model.engine import EngineParams, batch_cost_s
from loadgen.whatif.calibrate import (
    LLAMACPP_N_BATCH,
    MIN_STEP_BASE_MS,
    accept_distribution,
    accept_length,
    batch_knots,
    context_cost,
    cycle_steps,
    decode_step,
    fit,
    occupied_batch,
    residuals,
    stage_accept_length,
)
from loadgen.whatif.rows import stage_row
from loadgen.whatif.virtual_sweep import run_sweep, stage_rules

HIDDEN = EngineParams(kv_tokens=2_000_000, block_size=1, max_running=1024, prefill_chunk_tokens=8192,
                      step_base_s=0.012, step_per_seq_s=0.0004, step_per_prefill_token_s=0.00003,
                      spec_accept=(0.2, 0.3, 0.5))  # mean accept 2.3
LOADS = [1, 4, 16, 64, 128]


def _summary(params: EngineParams, n_in: int = 500, n_out: int = 300, loads: list[int] = LOADS) -> dict:
    recs = run_sweep(params, loads, n_in, n_out, stage_rules(ramp_s=0, warmup_s=5, duration_s=20))
    rows = [stage_row(r, params.kv_tokens) for r in recs]
    return {"scenario": {"input_tokens": n_in, "output_tokens": n_out}, "stages": rows,
            "guard": {"capacity_tokens": params.kv_tokens}, "server": {"flavor": "sglang", "max_model_len": 32768}}


def test_accept_length_inverts_tokens_per_chunk():
    # an N-token output in 1 + (N - 1) / L chunks
    n, mean = 1000, 2.75
    assert accept_length(n / (1 + (n - 1) / mean), n) == pytest.approx(mean)
    assert accept_length(1.0, n) == 1.0 and accept_length(None, n) == 1.0
    probs = accept_distribution(2.3)
    assert sum(probs) == pytest.approx(1) and sum((i + 1) * p for i, p in enumerate(probs)) == pytest.approx(2.3)
    # two drafts, each accepted with a = 0.745 (1 + a + a^2 = 2.3) until the first rejection
    a = (6.2 ** 0.5 - 1) / 2
    assert probs == pytest.approx([1 - a, a * (1 - a), a * a], abs=1e-5)
    assert accept_distribution(1.0) == [1.0] and len(accept_distribution(3.0)) == 4


def test_a_server_that_reports_no_speculation_steps_one_token_at_a_time():
    """llama-server without a draft model sent 1.0107 tokens per chunk (it holds back a token that
    ends inside a UTF-8 character): its /metrics, read in the window, reported no speculative step,
    so L = 1 and the preset draws no 2-token steps. A server that reports speculation, or whose
    metrics were not read, gets L from tokens per chunk."""
    n = 64
    watched = {"polls": 30, "flavor": "llamacpp", "disabled": None, "spec_accept_length": None}
    row = {"tokens_per_chunk": 1.0107, "server": watched}
    assert stage_accept_length(row, n) == 1.0
    from_chunks = accept_length(1.0107, n)
    assert from_chunks > 1.01
    assert stage_accept_length({"tokens_per_chunk": 1.0107}, n) == from_chunks  # no server figures
    assert stage_accept_length({**row, "server": {**watched, "polls": 0}}, n) == from_chunks
    assert stage_accept_length({**row, "server": {**watched, "disabled": "--no-watch"}}, n) == from_chunks
    assert stage_accept_length({**row, "server": {**watched, "flavor": "openai"}}, n) == from_chunks
    spec = {"tokens_per_chunk": 2.25, "server": {**watched, "flavor": "sglang", "spec_accept_length": 2.29}}
    assert stage_accept_length(spec, 100) == accept_length(2.25, 100)
    # the fit takes it: a llama.cpp run's preset draws one token per step
    assert fit({"scenario": {"input_tokens": 128, "output_tokens": n}, "guard": {},
                "stages": [{"concurrency": c, "requests": 20, "tpot_p50_s": 0.006 * c, "ttft_p50_s": 0.1,
                            "output_tokens_per_s": 100.0, "itl_chunk_p50_s": 0.006 * c, **row}
                           for c in (1, 2, 4)]}).accept_length == 1.0


def test_fit_recovers_hidden_engine_parameters_within_ten_percent():
    summary = _summary(HIDDEN)
    f = fit(summary)
    assert f.step_base_s == pytest.approx(HIDDEN.step_base_s, rel=0.10)
    assert f.step_per_seq_s == pytest.approx(HIDDEN.step_per_seq_s, rel=0.10)
    assert f.step_per_prefill_token_s == pytest.approx(HIDDEN.step_per_prefill_token_s, rel=0.10)
    assert f.accept_length == pytest.approx(2.3, rel=0.03)
    assert f.kv_tokens == HIDDEN.kv_tokens and f.used_stages == LOADS
    preset = f.preset(summary)
    assert preset["spec_accept"] and preset["prefill_chunk_tokens"] >= 500 and preset["kv_tokens"] == 2_000_000


def test_the_bench_sweeps_fit_each_parameter_within_five_percent():
    # bench/validate_whatif.py's sweeps (500 in at C = 1, 4, 16, 64 and 1500 in at C = 1, 16; 100 out;
    # 2 s warmup, 10 s windows) on the virtual engine: with batch = C (a user's request in every
    # step) b came out 5.4-6.4 % low on these seeds, as over HTTP; with the occupied batch 3.3-4.3 %
    # (docs/development/whatif-validation.md, 'Why the calibration counts the batch as it does':
    # the rest is the TPOT p50's). Those sweeps ticked the plan once a second, as Locust's shape loop
    # did then: the windows (and so the samples, and the fit's errors within these bounds) are theirs.
    plan = stage_rules(ramp_s=0, warmup_s=2, duration_s=10)
    for seed in (0, 1, 3):
        params = dataclasses.replace(HIDDEN, seed=seed)
        runs = []
        for n_in, loads in ((500, [1, 4, 16, 64]), (1500, [1, 16])):
            rows = [stage_row(r, params.kv_tokens) for r in run_sweep(params, loads, n_in, 100, plan, tick_s=1.0)]
            runs.append({"scenario": {"input_tokens": n_in, "output_tokens": 100}, "stages": rows, "guard": {}})
        f = fit(runs)
        assert f.step_base_s == pytest.approx(HIDDEN.step_base_s, rel=0.01)
        assert f.step_per_seq_s == pytest.approx(HIDDEN.step_per_seq_s, rel=0.05)
        assert f.step_per_prefill_token_s == pytest.approx(HIDDEN.step_per_prefill_token_s, rel=0.02)


def test_a_users_cycle_holds_one_step_without_its_request():
    # 100 tokens at L = 2.3: 1 + 99 / 2.3 = 44.04 steps in the engine, then one without a request
    n = 1 + 99 / 2.3
    assert cycle_steps(100, 2.3) == pytest.approx(n + 1)
    assert occupied_batch(1, 100, 2.3) == 1.0
    # the virtual engine's decode steps held 62.66 requests on average at C = 64
    # (docs/development/whatif-validation.md)
    assert occupied_batch(64, 100, 2.3) == pytest.approx(1 + 63 * n / (n + 1)) == pytest.approx(62.6, abs=0.05)
    # the median step's batch: 1 + the median of a binomial (users - 1, n / (n + 1)), its mean rounded
    assert occupied_batch(4, 100, 2.3, median=True) == 4.0  # 3 x 0.978 = 2.93 others
    assert occupied_batch(64, 100, 2.3, median=True) == 63.0  # 63 x 0.978 = 61.6 others
    assert occupied_batch(16, 2, 1.0, median=True) == 11.0  # n = 2: 15 x 2 / 3 = 10 others


def test_residuals_are_zero_against_itself_and_name_the_measured_value():
    summary = _summary(HIDDEN)
    res = residuals(summary, summary["stages"])
    assert [r["concurrency"] for r in res] == LOADS
    assert all(r["ttft_p50_s"]["rel"] == 0 for r in res)
    doubled = [dict(r, output_tokens_per_s=2 * r["output_tokens_per_s"]) for r in summary["stages"]]
    assert residuals(summary, doubled)[0]["output_tokens_per_s"]["rel"] == pytest.approx(1.0)


def _with_overhead(summary: dict, overhead_s: float) -> dict:
    """The client's own delay on every TTFT (what the engine never sees)."""
    for row in summary["stages"]:
        row["ttft_p50_s"] += overhead_s
    return summary


def test_one_prompt_length_counts_the_client_overhead_as_prefill():
    f = fit(_with_overhead(_summary(HIDDEN, n_in=200), 0.002))
    # TTFT(C=1) = a + b + p x 200 + 2 ms: the 2 ms land on p (2 ms / 200 tokens = +10 us/token)
    assert f.client_overhead_s is None
    assert f.step_per_prefill_token_s > HIDDEN.step_per_prefill_token_s * 1.2


def test_two_prompt_lengths_separate_prefill_from_the_client_overhead():
    runs = [_with_overhead(_summary(HIDDEN, n_in=200), 0.002), _with_overhead(_summary(HIDDEN, n_in=1500), 0.002)]
    f = fit(runs)
    assert f.client_overhead_s == pytest.approx(0.002, rel=0.25)
    assert f.step_per_prefill_token_s == pytest.approx(HIDDEN.step_per_prefill_token_s, rel=0.10)
    assert f.step_per_seq_s == pytest.approx(HIDDEN.step_per_seq_s, rel=0.10)
    assert f.step_base_s == pytest.approx(HIDDEN.step_base_s, rel=0.10)


READING = dataclasses.replace(HIDDEN, spec_accept=(1.0,), step_base_s=0.001, step_per_seq_s=0.005,
                              step_per_prefill_token_s=0.0007, step_per_context_token_s=1.3e-6)
# an engine like llama.cpp on one CPU core: little fixed cost, ~5 ms per sequence, 0.7 ms per prompt
# token and 1.3 us per context token a decoder reads (at 1,100 tokens of context +1.4 ms a step)


def test_two_prompt_lengths_recover_the_cost_per_context_token():
    # stages 1-4 one apart: with 1, 2, 4 the 512-token C = 2 and 4 stages catch their cohorts' phases
    # (decode-step residuals -11 %, +12 %) and b comes out 12 % low; c comes from C = 1 alone either way
    runs = [_with_overhead(_summary(READING, n_in=n, n_out=64, loads=[1, 2, 3, 4]), 0.002) for n in (128, 512)]
    f = fit(runs)
    assert f.step_per_context_token_s == pytest.approx(READING.step_per_context_token_s, rel=0.10)
    assert f.step_per_prefill_token_s == pytest.approx(READING.step_per_prefill_token_s, rel=0.10)
    assert f.step_per_seq_s == pytest.approx(READING.step_per_seq_s, rel=0.10)
    # a is ~1 ms beside b's 5: with the 2 ms client overhead the fit splits ~1 ms differently; their sum holds
    assert f.step_base_s + f.step_per_seq_s == pytest.approx(READING.step_base_s + READING.step_per_seq_s, rel=0.05)
    assert f.preset(runs[0])["step_per_context_token_ns"] == pytest.approx(1300, rel=0.10)


ATTENDING = dataclasses.replace(READING, step_per_prefill_pair_s=5e-7)
# llama.cpp's prompt cost per token grows with the prompt: 0.5 us per (prompt token, earlier token)


def _with_server_prompt(summary: dict, params: EngineParams) -> dict:
    """The server's own mean prompt time per token at C=1 (llama.cpp's counters): the prompt step alone."""
    n_in = summary["scenario"]["input_tokens"]
    step = (params.step_base_s + params.step_per_seq_s + params.step_per_prefill_token_s * n_in
            + params.step_per_prefill_pair_s * n_in * (n_in - 1) / 2)
    summary["stages"][0]["server"] = {"prompt_per_token": {"mean_s": step / n_in}}
    return summary


def test_the_servers_prompt_times_at_two_lengths_recover_a_prompt_cost_growing_with_its_square():
    runs = [_with_server_prompt(_with_overhead(_summary(ATTENDING, n_in=n, n_out=64, loads=[1, 2, 3, 4]), 0.002),
                                ATTENDING) for n in (128, 512)]
    f = fit(runs)
    assert f.step_per_prefill_pair_s == pytest.approx(ATTENDING.step_per_prefill_pair_s, rel=0.10)
    assert f.step_per_prefill_token_s == pytest.approx(ATTENDING.step_per_prefill_token_s, rel=0.10)
    assert f.client_overhead_s == pytest.approx(0.002, rel=0.25)
    assert f.preset(runs[0])["step_per_prefill_pair_ns"] == pytest.approx(500, rel=0.10)
    # without the server's prompt times the square's cost lands on p and d0: a 1024-token prompt,
    # twice the longest calibrated, comes out short
    plain = fit([_with_overhead(_summary(ATTENDING, n_in=n, n_out=64, loads=[1, 2, 3, 4]), 0.002) for n in (128, 512)])
    assert plain.step_per_prefill_pair_s == 0.0

    def prompt_s(g, n: int) -> float:
        return g.step_base_s + g.step_per_seq_s + g.step_per_prefill_token_s * n + g.step_per_prefill_pair_s * n * (n - 1) / 2

    truth = prompt_s(ATTENDING, 1024)
    assert prompt_s(f, 1024) == pytest.approx(truth, rel=0.05)
    assert prompt_s(plain, 1024) < 0.9 * truth


def test_the_decode_step_is_the_median_chunk_gap_where_prompts_are_rare():
    # llama.cpp, 512 in / 64 out, C = 4: the four users' prompts shared one batch, so no request's
    # TPOT held a prompt step; the even spread would put 1.37 req/s x 3/4 x 512 x d tokens in each step
    cohort = {"concurrency": 4, "output_tokens_per_s": 87.8, "tpot_p50_s": 0.01758, "itl_chunk_p50_s": 0.01718}
    # the batch of the median step: the decoding request and each other user's, in 64 of every 65
    # steps of its cycle: all four (a mean of 3.95)
    assert decode_step(cohort, 512, 64, 1.0) == (0.01718, 0.0, 4.0)
    # prompts in a third of the steps: a cohort may put one in every step of a window; the TPOT's average
    busy = dict(cohort, output_tokens_per_s=1250.0, itl_chunk_p50_s=0.0455)  # 19.5 req/s x 45.5 ms = 0.89
    d, x, batch = decode_step(busy, 512, 64, 1.0)
    assert d == 0.01758 and x == pytest.approx(1250.0 / 64 * 3 / 4 * 512 * 0.01758)
    assert batch == pytest.approx(1 + 3 * 64 / 65)  # each other user's request in 64 of its 65 steps
    assert decode_step({k: v for k, v in cohort.items() if k != "itl_chunk_p50_s"}, 512, 64, 1.0)[1] > 0
    # requests waiting in the server's queue (2 slots for 4 users): every step holds both slots
    assert decode_step(busy, 512, 64, 1.0, users=2)[2] == 2.0
    assert decode_step(dict(cohort, concurrency=8), 512, 64, 1.0, users=4)[2] == 4.0


def test_one_prompt_length_leaves_the_context_cost_at_zero():
    assert fit(_summary(READING, n_in=512, n_out=64, loads=[1, 2, 4])).step_per_context_token_s == 0.0


def test_a_llamacpp_preset_prefills_in_llama_servers_batch():
    summary = _summary(HIDDEN)
    summary["server"] = {"flavor": "llamacpp", "slots": 4, "max_model_len": 4096}
    preset = fit(summary).preset(summary)
    assert preset["prefill_chunk_tokens"] == LLAMACPP_N_BATCH and preset["max_running"] == 4


def test_max_batch_fits_only_the_stages_up_to_that_batch():
    runs = [_summary(READING, n_in=n, n_out=64, loads=[1, 2, 4, 8]) for n in (128, 512)]
    f = fit(runs, max_batch=2)
    assert f.used_stages == [1, 2, 1, 2]
    # the steps at batch 1 and 2, the line a prediction on 2 slots runs on
    for batch in (1, 2):
        assert f.step_base_s + batch * f.step_per_seq_s == pytest.approx(
            READING.step_base_s + batch * READING.step_per_seq_s, rel=0.05)
    assert f.step_per_context_token_s == pytest.approx(READING.step_per_context_token_s, rel=0.10)


def test_a_step_no_line_fits_is_kept_as_measured_knots():
    """An engine whose step is 6.1, 12.2 and 14.3 ms at batch 1, 2 and 4 (llama.cpp on a CPU): the
    line through them misses the batch-2 step by ~20 %, so the preset carries the measured steps as
    knots, within 5 % of the engine's at each batch; an engine whose step is one line gets none."""
    truth = ((1.0, 0.0061), (2.0, 0.0122), (4.0, 0.0143))
    bent = dataclasses.replace(READING, step_batch_s=truth, step_per_seq_s=0.001)
    runs = [_summary(bent, n_in=n, n_out=64, loads=[1, 2, 4]) for n in (128, 512)]
    f = fit(runs, max_batch=4)
    knots = f.preset(runs[0])["step_batch_ms"]
    assert len(knots) == 3
    for (b, ms), (_, true_s) in zip(knots, truth, strict=True):
        engine_ms = batch_cost_s(bent, b) * 1e3  # the engine's batch part at the knot's (occupied) batch
        assert ms == pytest.approx(engine_ms, rel=0.05), (b, ms, true_s)
    straight = fit([_summary(READING, n_in=n, n_out=64, loads=[1, 2, 4]) for n in (128, 512)], max_batch=4)
    assert straight.step_batch_s == [] and "step_batch_ms" not in straight.preset(runs[0])
    # the rule: knots only where the line misses a step by more than 10 % of it
    assert batch_knots([(1, 6.0, 6.0), (2, 12.0, 12.0), (4, 14.0, 14.0)], 5.0, 2.5) == \
        [(1.0, 6.0), (2.0, 12.0), (4.0, 14.0)]
    assert batch_knots([(1, 6.0, 6.0), (2, 8.4, 8.4)], 3.5, 2.5) == []


def test_a_fitted_step_base_of_zero_is_written_as_the_smallest_valid_step():
    summary = _summary(HIDDEN)
    f = dataclasses.replace(fit(summary), step_base_s=0.0)
    assert f.preset(summary)["step_base_ms"] == MIN_STEP_BASE_MS > 0


def test_a_context_slope_within_the_noise_of_a_tpot_is_taken_as_zero():
    # C=1 decode steps of 6.0 and 6.2 ms at 160 and 544 tokens of context: 3 %, under CONTEXT_MIN_EFFECT
    assert context_cost([(160, 0.0060), (544, 0.0062)]) == 0.0
    assert context_cost([(160, 0.0060), (544, 0.0066)]) == pytest.approx(0.0006 / 384)
    assert context_cost([(160, 0.0060)]) == 0.0 and context_cost([(160, 0.0062), (544, 0.0060)]) == 0.0
