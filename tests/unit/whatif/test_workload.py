"""The what-if's virtual requests follow the scenario as the run draws it: length distributions
(seeded per user as the run's users), a dataset's lines in order, open-loop arrivals of the stage's
seeded ArrivalSpec, Locust's spawn schedule for a ramp, and rows whose token figures come from the
requests themselves."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from loadgen.engine_model.engine import EngineParams
from loadgen.run.kv_guard import decide, max_fitting_concurrency, max_fitting_concurrency_of
from loadgen.run.plan import TICK_S
from loadgen.sim.config import load
from loadgen.whatif.rows import stage_row
from loadgen.whatif.summary import WhatIf, predict
from loadgen.whatif.virtual_sweep import Timing, VirtualStage, run_sweep, spawn_offsets, stage_rules
from loadgen.whatif.virtual_workload import VirtualWorkload
from loadgen.workload.arrivals import ArrivalSpec
from loadgen.workload.asks import PromptMaker, Workload
from loadgen.workload.dataset import DatasetRequest, share
from loadgen.workload.lengths import LengthDist

PARAMS = EngineParams(kv_tokens=2_000_000, max_running=512, step_base_s=0.01, step_per_seq_s=0.0001,
                      step_per_prefill_token_s=2e-6)
PLAN = stage_rules(ramp_s=0, warmup_s=2, duration_s=20, turnover=False)
UNIFORM_OUT = LengthDist("uniform", min=50, max=150)
LOGNORMAL_IN = LengthDist("lognormal", mean=2000, std=600, min=200, max=4000)


def _sent(rec: VirtualStage) -> list[tuple[int, int]]:
    """(input, output) of each request measured in the stage (output: the tokens it received)."""
    return [(t.input_tokens, t.tokens) for t in rec.requests if t.done]


def test_uniform_output_and_lognormal_input_are_drawn_as_asked():
    wl = VirtualWorkload(LOGNORMAL_IN, UNIFORM_OUT)
    (rec,) = run_sweep(PARAMS, [32], stages=PLAN, workload=wl)
    ins, outs = np.array(_sent(rec)).T
    n = len(outs)
    assert n > 300
    assert outs.min() >= 50 and outs.max() <= 150 and len(set(outs)) > 90  # the whole range, not one value
    # uniform 50..150: mean 100, std 29.2; the sample mean within 4 standard errors
    assert abs(outs.mean() - 100) < 4 * 29.2 / math.sqrt(n)
    assert ins.min() >= 200 and ins.max() <= 4000
    assert abs(ins.mean() - 2000) < 4 * 600 / math.sqrt(n)


def test_a_virtual_user_asks_for_the_lengths_the_run_s_user_with_its_number_asks_for():
    """User u of a local run is keyed (prompt.seed, 0, u): its Workload hands out the same lengths."""
    seed = 7
    wl = VirtualWorkload(LOGNORMAL_IN, UNIFORM_OUT, prompt_seed=seed)
    for user in (0, 3):
        key = (seed, 0, user)
        run_user = Workload(PromptMaker("token_ids", (1000, 30000), key), LOGNORMAL_IN, UNIFORM_OUT, key)
        virtual = wl.sender(user, None)
        for _ in range(5):
            ask = run_user.next()
            assert virtual.next() == (ask.input_tokens, ask.output_tokens)


def _lines(n: int) -> tuple[DatasetRequest, ...]:
    return tuple(DatasetRequest(i + 1, 100 * (i + 1), 10 + i) for i in range(n))


def test_one_user_sends_the_dataset_s_lines_in_file_order_cycling():
    lines = _lines(5)
    wl = VirtualWorkload(dataset=lines, dataset_path="d.jsonl")
    (rec,) = run_sweep(PARAMS, [1], stages=PLAN, workload=wl)
    sent = _sent(rec)
    assert len(sent) > 10
    cycle = [(r.input_tokens, r.output_tokens) for r in lines]
    start = cycle.index(sent[0])
    assert sent == [cycle[(start + i) % 5] for i in range(len(sent))]


def test_a_shuffled_dataset_follows_the_run_s_seeded_permutation():
    lines = _lines(7)
    wl = VirtualWorkload(dataset=lines, dataset_path="d.jsonl", shuffled=True, prompt_seed=3)
    (rec,) = run_sweep(PARAMS, [1], stages=PLAN, workload=wl)
    order = [(r.input_tokens, r.output_tokens) for r in share(list(lines), 0, 1, True, 3)]
    assert order != [(r.input_tokens, r.output_tokens) for r in lines]
    sent = _sent(rec)
    start = order.index(sent[0])
    assert sent == [order[(start + i) % 7] for i in range(len(sent))]


def test_a_line_without_output_tokens_takes_the_output_draw():
    wl = VirtualWorkload(outputs=UNIFORM_OUT, dataset=(DatasetRequest(1, 300, None),), dataset_path="d.jsonl")
    sender = wl.sender(0, wl.cursor(0, 1))
    outs = {sender.next()[1] for _ in range(50)}
    assert all(50 <= o <= 150 for o in outs) and len(outs) > 10


def test_a_text_prompt_line_is_refused_naming_the_dataset():
    from loadgen.errors import ConfigError

    with pytest.raises(ConfigError, match="workload.dataset.*line 2.*input_tokens"):
        VirtualWorkload(dataset=(DatasetRequest(1, 300, 5), DatasetRequest(2, None, 5, prompt="hello")),
                        dataset_path="d.jsonl")


def test_poisson_arrivals_follow_the_stage_s_seeded_schedule():
    rate, seed = 20.0, 5
    wl = VirtualWorkload(LengthDist("fixed", 100), LengthDist("fixed", 5), arrival="poisson", rate_seed=seed)
    plan = stage_rules(ramp_s=0, warmup_s=5, duration_s=60, turnover=False)
    (rec,) = run_sweep(PARAMS, [rate], stages=plan, open_loop=True, workload=wl)
    sent = [t.sent_s for t in rec.requests]
    # the count in the window: Poisson(rate x window), within 4 standard deviations
    expected = rate * rec.window_s
    assert abs(len(sent) - expected) < 4 * math.sqrt(expected)
    # and exactly the run's schedule: stage 0's ArrivalSpec.for_stage from the stage's start (t = 0)
    due = ArrivalSpec.for_stage(rate, "poisson", 1.0, seed, 0).for_part(0, 1).until(rec.window_start_s + rec.window_s)
    assert sent == pytest.approx([t for t in due if t >= rec.window_start_s])
    gaps = np.diff(sent)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.15)  # exponential gaps: CV 1, not 0


def test_locust_s_spawn_schedule_for_the_plan_s_spawn_rate():
    """The plan asks spawn_rate = max(C / ramp_s, 1) (``Tick.spawn_rate``); Locust starts floor(rate)
    users every floor(rate) / rate seconds. 8 -> 16 over 5 s: rate 3.2, 3 users every 0.9375 s."""
    assert spawn_offsets(8, 16, 3.2) == pytest.approx([0, 0, 0, 0.9375, 0.9375, 0.9375, 1.875, 1.875])
    assert spawn_offsets(2, 4, 1.0) == [0.0, 1.0]  # rate max(4/5, 1) = 1: one a second
    assert spawn_offsets(0, 3, 3.0) == [0.0, 0.0, 0.0]  # ramp_s 0: the plan asks every user at once
    assert spawn_offsets(4, 4, 3.2) == []


def test_a_ramp_starts_the_users_spread_and_opens_the_window_a_tick_after_the_last():
    plan = stage_rules(warmup_s=0, duration_s=5, turnover=False, ramp_s=5.0)
    wl = VirtualWorkload(LengthDist("fixed", 100), LengthDist("fixed", 2000))  # requests outlast the stage
    together = run_sweep(PARAMS, [16], stages=stage_rules(ramp_s=0, warmup_s=0, duration_s=5, turnover=False), workload=wl)
    spread = run_sweep(PARAMS, [16], stages=plan, workload=wl)
    # 0 -> 16 over 5 s: 3 users every 0.9375 s, the last at 5 x 0.9375 = 4.69 s: the ramp ends at the
    # first tick after it (TICK_S 0.2 s: 4.8 s), and the plan's warmup, a phase of its own even at 0 s,
    # ends at the next tick: the window opens at 5.0 s; all together, at the second tick
    last_user = 5 * 0.9375
    assert spread[0].window_start_s == pytest.approx((math.ceil(last_user / TICK_S) + 1) * TICK_S)
    assert together[0].window_start_s == pytest.approx(2 * TICK_S)


def test_rows_count_each_request_s_own_tokens():
    def timing(n_in, chunks, rejected=False):
        t = Timing(0.0, 0, chunk_t=[0.1 * (i + 1) for i in range(len(chunks))], chunk_n=list(chunks),
                   done=True, rejected=rejected, input_tokens=n_in)
        return t

    rec = VirtualStage(0, 3, None, window_s=2.0, window_tokens=30,
                      requests=[timing(100, [1, 4]), timing(2500, [1, 9, 10]), timing(700, [], rejected=True)])
    for t in rec.requests:  # as each finishes in the virtual run: the run's StageStats of its RequestResult
        rec.stats.add_result(t.result(), t.input_tokens, t.output_tokens)
    row = stage_row(rec, 10_000)
    assert row["input_tokens"] == 2600 and row["output_tokens"] == 25 and row["requests"] == 2
    assert row["errors"] == {"overload_503": 1}
    # TPOT per request: (E2E - TTFT) / (N - 1): 0.1 / 4 and 0.2 / 19; the p50 is the client's, the
    # sample of rank ceil(0.5 x 2) = 1 (the middle of its log bucket: within 1.16 %), not the two's mean
    assert row["tpot_p50_s"] == pytest.approx(0.2 / 19, rel=0.0117)


def test_a_two_mode_ttft_p50_is_a_value_a_request_had_as_a_run_reports_it():
    """Half the prompts alone in their step (1.07 s), half behind another's (2.16 s): a run's p50 is
    the sample of rank ceil(0.5 x 20) = 10, the slowest of the fast half; numpy's interpolated
    median (1.6 s) is a TTFT no request had (llama.cpp, 1024-token prompts on 4 slots at C = 4)."""
    fast, slow = [1.0 + 0.007 * i for i in range(10)], [2.1 + 0.006 * i for i in range(10)]
    rec = VirtualStage(0, 4, None, window_s=30.0, window_tokens=1280,
                      requests=[Timing(0.0, 0, chunk_t=[t, t + 0.5], chunk_n=[1, 63], done=True, input_tokens=1024)
                                for t in slow + fast])
    for t in rec.requests:
        rec.stats.add_result(t.result(), t.input_tokens, t.output_tokens)
    row = stage_row(rec, 16_384)
    assert row["ttft_p50_s"] == pytest.approx(fast[-1], rel=0.0117)
    assert row["ttft_p90_s"] == pytest.approx(slow[7], rel=0.0117)  # rank ceil(0.9 x 20) = 18


def test_a_request_above_max_model_len_is_answered_400_and_its_user_pauses():
    wl = VirtualWorkload(LengthDist("fixed", 100), LengthDist("uniform", min=10, max=300))
    (rec,) = run_sweep(PARAMS, [4], stages=PLAN, workload=wl, max_model_len=300)
    row = stage_row(rec, PARAMS.kv_tokens)
    too_long = [t for t in rec.requests if t.too_long]
    assert too_long and all(t.tokens == 0 for t in too_long)
    assert row["errors"]["http_4xx"] == len(too_long) and row["requests"] == len(rec.requests) - len(too_long)


@pytest.mark.parametrize("pause_s", [0.25, 2.5])
def test_after_a_refused_request_the_user_pauses_as_the_scenario_says(pause_s, tmp_path):
    """One user: a request refused 400 at once, and the next one sent request.client_error_pause_s
    later (the scenario's value, as a run's user sleeps it), not a fixed second."""
    from loadgen.config.build import build_scenario
    from loadgen.whatif.scenario import whatif_of

    sc = build_scenario({"output": {"dist": "uniform", "min": 10, "max": 300},
                         "request": {"client_error_pause_s": pause_s}})
    w, _ = whatif_of(sc)
    assert w.client_error_pause_s == pause_s
    wl = VirtualWorkload(LengthDist("fixed", 100), LengthDist("uniform", min=10, max=300))
    (rec,) = run_sweep(PARAMS, [1], stages=PLAN, error_pause_s=pause_s, workload=wl,
                       max_model_len=300)
    sent = sorted(rec.requests, key=lambda t: t.sent_s)
    gaps = [b.sent_s - a.sent_s for a, b in itertools.pairwise(sent) if a.too_long]
    assert gaps and gaps == pytest.approx([pause_s] * len(gaps))


def test_the_kv_ceiling_is_the_guard_s_projection():
    fixed = VirtualWorkload.fixed(1000, 1000).mix()
    for margin in (0.0, 0.1):
        assert max_fitting_concurrency_of(131_072, fixed, margin) == max_fitting_concurrency(131_072, 1000, 1000, margin)
    mixed = VirtualWorkload(LOGNORMAL_IN, UNIFORM_OUT).mix()
    c = max_fitting_concurrency_of(131_072, mixed, 0.1)
    # the last concurrency the run's guard lets run, projecting each stage with the same mix
    assert decide(c, 131_072, *mixed.split(c), 0.1, "abort").allowed
    assert not decide(c + 1, 131_072, *mixed.split(c + 1), 0.1, "abort").allowed


def test_predict_without_a_workload_is_the_fixed_prediction():
    cfg = load("llama8b-1gpu-vllm")
    plan = stage_rules(ramp_s=0, warmup_s=1, duration_s=4)
    old = predict(cfg, WhatIf(500, 50, (1, 8), stages=plan))
    new = predict(cfg, WhatIf(500, 50, (1, 8), stages=plan, workload=VirtualWorkload.fixed(500, 50)))
    assert old["stages"] == new["stages"]
    assert old["scenario"]["predicted_workload"] == "500 in / 50 out"
    assert old["stages"][1]["input_tokens"] == 500 * old["stages"][1]["requests"]


def test_an_arrival_due_with_max_inflight_requests_in_flight_is_dropped_not_delayed():
    """Overload (requests of 2000 tokens out, 50 arrivals/s): with rate.max_inflight 8 the dispatcher
    sends only while fewer than 8 are in flight; the rest are counted, never sent late."""
    wl = VirtualWorkload(LengthDist("fixed", 100), LengthDist("fixed", 2000), arrival="constant", max_inflight=8)
    plan = stage_rules(ramp_s=0, warmup_s=2, duration_s=10, turnover=False)
    (rec,) = run_sweep(PARAMS, [50.0], stages=plan, open_loop=True, workload=wl)
    row = stage_row(rec, PARAMS.kv_tokens)
    assert row["scheduled_rate_per_s"] == pytest.approx(50.0, rel=0.01)
    assert row["dropped_by_client"] == rec.scheduled - len(rec.requests) > 400
    assert len(rec.requests) <= 8  # at most 8 in flight, and each lives far longer than the window
    (free,) = run_sweep(PARAMS, [50.0], stages=plan, open_loop=True,
                        workload=dataclasses.replace(wl, max_inflight=None))
    assert free.dropped == 0 and len(free.requests) == free.scheduled
