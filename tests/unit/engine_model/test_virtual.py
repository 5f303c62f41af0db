"""The engine on a virtual clock (loadgen.engine_model.virtual): the runner's admission rule, known answers."""

from __future__ import annotations

import pytest

from loadgen.engine_model.engine import EngineParams, SimRequest
from loadgen.engine_model.virtual import VirtualServer
from loadgen.run.plan import TICK_S
from loadgen.sim.config import load
from loadgen.whatif.virtual_sweep import run_sweep, stage_rules

# TPOT(C) = 10 ms + 1 ms x C in lockstep, prefill free (the slo-linear preset's engine)
LINEAR = EngineParams(kv_tokens=10_000_000, block_size=16, max_running=4096, prefill_chunk_tokens=1_000_000,
                      step_base_s=0.010, step_per_seq_s=0.001, step_per_prefill_token_s=0.0)


def test_a_request_arriving_at_a_step_end_joins_the_step_after_next():
    """The runner computes step n+1 as soon as it delivered step n: a request sent at step n's end
    (a closed-loop user's next one) joins step n+2, and step n+1 runs without it."""
    done_at: dict[str, float] = {}

    def on_chunk(req, n, done, t):
        if done:
            done_at[req.sink] = t
            if req.sink == "short":  # its user sends the next request at once
                server.submit(SimRequest(1, 1, sink="next"), t)

    server = VirtualServer(LINEAR, on_chunk, record=True)
    server.submit(SimRequest(1, 2, sink="short"), 0.0)
    server.submit(SimRequest(1, 6, sink="long"), 0.0)
    server.run_until(1.0)
    assert done_at["short"] == pytest.approx(0.024)  # step 2 (prefill, then 1 decode) at 2 x 12 ms
    batches = [len(s.emitted) for s in server.schedule]
    durations = [round(s.duration_s, 6) for s in server.schedule]
    # step 3: "long" alone (11 ms); step 4: "long" + the new request's prefill (12 ms)
    assert batches[:4] == [2, 2, 1, 2] and durations[:4] == [0.012, 0.012, 0.011, 0.012]
    assert done_at["next"] == pytest.approx(0.024 + 0.011 + 0.012)


def test_an_idle_engine_starts_a_step_at_the_arrival():
    starts = []
    server = VirtualServer(LINEAR, lambda req, n, done, t: None, record=True)
    server.submit(SimRequest(1, 1), 5.0)
    server.submit(SimRequest(1, 1), 5.0)
    server.run_until(10.0)
    starts = [(s.start_s, len(s.emitted)) for s in server.schedule]
    assert starts == [(5.0, 2)]


@pytest.mark.parametrize("users", [1, 4, 32])
def test_closed_loop_lockstep_ttft_and_tpot_are_one_step_of_the_whole_batch(users):
    """C users sent together stay in step: every step holds all C, so TTFT = TPOT = 10 ms + C x 1 ms."""
    (rec,) = run_sweep(LINEAR, [users], 100, 50, stage_rules(ramp_s=0, warmup_s=1, duration_s=3))
    step = 0.010 + 0.001 * users
    assert rec.requests and all(t.done for t in rec.requests)
    for t in rec.requests:
        assert t.ttft_s == pytest.approx(step) and t.tpot_s == pytest.approx(step)
    # throughput: C tokens per step, whatever window the turnover rule chose
    assert rec.window_tokens / rec.window_s == pytest.approx(users / step, rel=0.02)


def test_open_loop_stage_at_a_low_rate_sees_an_empty_server():
    """1 req/s of 10-token requests on a 11 ms step: each request runs alone, E2E = 10 steps."""
    (rec,) = run_sweep(LINEAR, [1.0], 100, 10, stage_rules(ramp_s=0, warmup_s=2, duration_s=10), open_loop=True)
    assert 9 <= len(rec.requests) <= 11
    for t in rec.requests:
        assert t.ttft_s == pytest.approx(0.011) and t.e2e_s == pytest.approx(0.110)


def test_kv_pressure_preempts_in_virtual_time_too():
    params = EngineParams(kv_tokens=4000, block_size=16, max_running=64, prefill_chunk_tokens=8192,
                          step_base_s=0.01, step_per_seq_s=0.0, step_per_prefill_token_s=0.0)
    (rec,) = run_sweep(params, [8], 300, 300, stage_rules(ramp_s=0, warmup_s=1, duration_s=5))
    assert rec.preemptions > 0 and rec.peak_kv_tokens <= 4000


def _closed_loop(params: EngineParams, users: int, prompt: int, output: int, warmup_s: float, window_s: float):
    """One closed-loop stage of ``users`` on a fresh engine, fixed warmup and window (no turnover)."""
    plan = stage_rules(ramp_s=0, warmup_s=warmup_s, duration_s=window_s, turnover=False, max_warmup_s=warmup_s,
                     max_window_s=window_s)
    (rec,) = run_sweep(params, [users], prompt, output, plan)
    return rec


def test_qwen_preset_rises_then_flattens_and_matches_the_seeds_c32():
    """The preset's comment: C=32 ~2,150 output tok/s (1000 in / 1000 out), the knee at C=128."""
    params = load("qwen35-397b-8gpu").engine_params()
    rate = {c: (r := _closed_loop(params, c, 1000, 1000, 300, 300)).window_tokens / r.window_s
            for c in (1, 8, 32, 128, 512)}
    assert rate[32] == pytest.approx(2156, rel=0.10)
    assert rate[1] < rate[8] < rate[32] < rate[128] < rate[512]  # rising
    assert rate[512] / rate[128] < 1.5 < rate[32] / rate[8]  # 4x more users: big gain at low C, little at high C


@pytest.mark.parametrize("users", [1, 8, 35, 36, 64])
def test_slo_linear_preset_has_tpot_in_closed_form(users):
    """slo-linear: TPOT(C) = 10 ms + 1 ms x C (the SLO search's known answer), no queue, no preemption."""
    rec = _closed_loop(load("slo-linear").engine_params(), users, 50, 100, 5, 30)
    per_user_tokens_per_s = rec.window_tokens / rec.window_s / users
    assert 1 / per_user_tokens_per_s == pytest.approx(0.010 + 0.001 * users, rel=0.01)
    assert rec.preemptions == 0 and rec.peak_waiting <= users


@pytest.mark.parametrize("tick_s,opens,closes", [(1.0, 4.0, 7.0), (TICK_S, 3.4, 6.6)])
def test_stage_rules_are_checked_on_the_shapes_tick(tick_s, opens, closes):
    """As SweepShape: the ramp ends at the next tick, and a rule that holds between ticks is seen at
    the next one (the run's ``TICK_S``, 0.2 s, and Locust's own 1 s). One user, 300 tokens on an
    11 ms step: each request lives 3.3 s. Warmup 1 s from the first tick, turnover (1 finished, at
    3.3 s): the window opens at the first tick after 3.3 s. The plan's window turnover counts
    requests of any stage finished since it opened (``SweepPlan._turned_over``): the one sent at
    3.3 s (not measured) finishes at 6.6 s and the window closes at the first tick at or after it,
    holding the one measured request sent at 6.6 s."""
    (rec,) = run_sweep(LINEAR, [1], 1, 300, stage_rules(ramp_s=0, warmup_s=1, duration_s=1, turnover=True),
                       tick_s=tick_s)
    assert rec.window_start_s == pytest.approx(opens) and rec.window_start_s + rec.window_s == pytest.approx(closes)
    assert [t.sent_s for t in rec.requests] == [pytest.approx(6.6)]


def test_stage_rules_hold_at_their_instants_when_the_plan_ticks_after_every_step():
    (cont,) = run_sweep(LINEAR, [1], 1, 300, stage_rules(ramp_s=0, warmup_s=1, duration_s=1, turnover=True), tick_s=0)
    assert cont.window_start_s == pytest.approx(3.3) and cont.window_s == pytest.approx(3.3)  # at the rule's instants
