"""Pure timing models of the simulator: no sockets, no sleeps, simulated time only."""

from __future__ import annotations

import dataclasses

import pytest

from loadgen.engine_model.engine import (
    FINISHED,
    RUNNING,
    WAITING,
    Engine,
    EngineParams,
    QueueFull,
    SimRequest,
    batch_cost_s,
)
from loadgen.engine_model.fixed import FixedSchedule
from loadgen.sim.config import load

QWEN = load("qwen35-397b-8gpu").engine_params()


def run_to_completion(engine: Engine, max_steps: int = 1_000_000) -> tuple[float, dict]:
    """Step until idle; returns (simulated seconds, {request: tokens emitted})."""
    t, emitted = 0.0, {}
    for _ in range(max_steps):
        if engine.idle:
            return t, emitted
        duration, events = engine.step()
        t += duration
        for req, n, _done in events:
            emitted[req] = emitted.get(req, 0) + n
        assert_kv_consistent(engine)
    raise AssertionError("engine did not drain")


def assert_kv_consistent(engine: Engine) -> None:
    held = sum(r.kv_held for r in engine.running)
    assert engine.kv_used == held
    assert 0 <= engine.kv_used <= engine.params.kv_tokens
    assert all(r.kv_held == 0 for r in engine.waiting)


def test_admission_reserves_prompt_plus_one_rounded_to_blocks():
    engine = Engine(EngineParams(kv_tokens=1000, block_size=16, prefill_chunk_tokens=10_000))
    a, b = SimRequest(100, 10), SimRequest(30, 10)
    engine.submit(a)
    engine.submit(b)
    _, events = engine.step()
    # both prefilled in one step (budget 10k) and each emitted its first token
    assert [(r, n) for r, n, _ in events] == [(a, 1), (b, 1)]
    assert a.kv_held == 112 and b.kv_held == 32  # ceil((100+1)/16)*16, ceil((30+1)/16)*16
    assert engine.kv_used == 144
    assert engine.stats.prompt_tokens_total == 130


def test_admission_waits_when_kv_is_full_and_is_fifo():
    engine = Engine(EngineParams(kv_tokens=300, block_size=1, prefill_chunk_tokens=10_000))
    big, small, tiny = SimRequest(200, 50), SimRequest(150, 5), SimRequest(10, 5)
    for r in (big, small, tiny):
        engine.submit(r)
    _, first = engine.step()
    # small does not fit after big; tiny would, but may not overtake the head of the queue
    assert big.state == RUNNING and small.state == WAITING and tiny.state == WAITING
    assert [(r, n) for r, n, _ in first] == [(big, 1)]
    _, emitted = run_to_completion(engine)
    assert emitted == {big: 49, small: 5, tiny: 5}
    assert engine.kv_used == 0


def test_chunked_prefill_budget_and_step_duration_formula():
    p = EngineParams(kv_tokens=10_000, prefill_chunk_tokens=100, step_base_s=0.01,
                     step_per_seq_s=0.001, step_per_prefill_token_s=0.0001)
    engine = Engine(p)
    engine.submit(SimRequest(250, 3))
    durations = [engine.step()[0] for _ in range(3)]
    # 100 + 100 + 50 prompt tokens over three steps, one sequence in each
    assert durations == pytest.approx([0.01 + 0.001 + 0.01, 0.01 + 0.001 + 0.01, 0.01 + 0.001 + 0.005])
    duration, events = engine.step()  # pure decode: one sequence, no prefill
    assert duration == pytest.approx(0.011) and events[0][1] == 1


def test_decode_steps_cost_their_context_tokens():
    p = EngineParams(kv_tokens=10_000, step_base_s=0.01, step_per_seq_s=0.001, step_per_prefill_token_s=0.0001,
                     step_per_context_token_s=1e-6)
    engine = Engine(p)
    engine.submit(SimRequest(100, 4))
    engine.submit(SimRequest(300, 4))
    # step 1 prefills both (no decoder reads a context); then both decode with 1, 2, 3 tokens generated
    assert engine.step()[0] == pytest.approx(0.01 + 0.002 + 0.04)
    for generated in (1, 2, 3):
        assert engine.step()[0] == pytest.approx(0.01 + 0.002 + 1e-6 * (100 + 300 + 2 * generated))


def test_a_prompt_token_costs_the_earlier_tokens_of_its_sequence():
    # chunks of 100: positions 0-99 pair with 0 + 1 + ... + 99 = 4950 earlier tokens, 100-199 with
    # 100 + ... + 199 = 14950, 200-249 with 200 + ... + 249 = 11225; the decode step pairs none
    p = EngineParams(kv_tokens=10_000, prefill_chunk_tokens=100, step_base_s=0.01, step_per_seq_s=0.001,
                     step_per_prefill_token_s=0.0001, step_per_prefill_pair_s=1e-7)
    engine = Engine(p)
    engine.submit(SimRequest(250, 2))
    durations = [engine.step()[0] for _ in range(4)]
    assert durations == pytest.approx([0.021 + 1e-7 * 4950, 0.021 + 1e-7 * 14950, 0.016 + 1e-7 * 11225, 0.011])
    # in one chunk the same prompt pairs 250 x 249 / 2 = 31125 times: a prompt's cost grows with its square
    whole = Engine(dataclasses.replace(p, prefill_chunk_tokens=2048))
    whole.submit(SimRequest(250, 2))
    assert whole.step()[0] == pytest.approx(0.01 + 0.001 + 0.025 + 1e-7 * 31125)


def test_a_steps_batch_part_follows_measured_knots():
    """Knots (batch, s) replace step_base + step_per_seq x batch: straight lines between them,
    step_per_seq's slope beyond the first and the last (llama.cpp on a CPU: 6, 12, 14 ms)."""
    p = EngineParams(step_base_s=0.5, step_per_seq_s=0.001, step_batch_s=((1, 0.006), (2, 0.012), (4, 0.014)))
    for batch, ms in ((1, 6), (1.5, 9), (2, 12), (3, 13), (4, 14), (6, 16), (0.5, 5.5)):
        assert batch_cost_s(p, batch) == pytest.approx(ms / 1e3), batch
    assert batch_cost_s(dataclasses.replace(p, step_batch_s=()), 3) == pytest.approx(0.503)
    engine = Engine(dataclasses.replace(p, step_per_prefill_token_s=0.0))
    for r in (SimRequest(10, 5), SimRequest(10, 5)):
        engine.submit(r)
    assert engine.step()[0] == pytest.approx(0.012)  # two prefills, batch 2
    assert engine.step()[0] == pytest.approx(0.012)  # two decodes


def test_max_running_caps_the_batch():
    engine = Engine(EngineParams(kv_tokens=100_000, max_running=2))
    reqs = [SimRequest(10, 100) for _ in range(5)]
    for r in reqs:
        engine.submit(r)
    engine.step()
    assert engine.num_running == 2 and engine.num_waiting == 3



@pytest.mark.parametrize("limit", ["slots", "kv"])
def test_a_finished_requests_slot_and_kv_are_free_only_after_its_step(limit):
    """A request waiting for a slot (or for KV) is admitted in the step after the one that
    emitted the last token of the request it replaces, never in that step: a real scheduler
    learns a request finished once the step's tokens are sampled (llama.cpp releases the slot
    after the batch, and launches the deferred task in the next one). Admitted in the same step,
    the newcomer's prompt would be computed inside the finisher's last decode step, delaying the
    finisher's last token by a whole prompt (at 4 slots and 1024-token prompts every request's
    E2E held four prompts instead of three)."""
    params = EngineParams(max_running=1, kv_tokens=100_000, prefill_chunk_tokens=1000, step_base_s=0.01,
                          step_per_seq_s=0.0, step_per_prefill_token_s=0.001)
    if limit == "kv":
        params = dataclasses.replace(params, max_running=8, kv_tokens=110, block_size=1)
    engine = Engine(params)
    first, second = SimRequest(100, 3), SimRequest(100, 3)
    engine.submit(first)
    engine.submit(second)
    steps = [engine.step() for _ in range(3)]
    # prefill of first (0.11 s), two decode steps; its last token ends a plain decode step
    assert [[(r is first, n, done) for r, n, done in events] for _, events in steps] == \
        [[(True, 1, False)], [(True, 1, False)], [(True, 1, True)]]
    assert [round(d, 6) for d, _ in steps] == [0.11, 0.01, 0.01]
    assert first.state == FINISHED and second.state == WAITING and engine.kv_used == 0
    duration, events = engine.step()  # the next step admits second and computes its prompt
    assert second.state == RUNNING and events == [(second, 1, False)] and round(duration, 6) == 0.11
    assert engine.kv_used == second.kv_held
def test_queue_cap_refuses_new_requests():
    engine = Engine(EngineParams(max_queued=2))
    engine.submit(SimRequest(10, 10))
    engine.submit(SimRequest(10, 10))
    with pytest.raises(QueueFull, match="max_queued=2"):
        engine.submit(SimRequest(10, 10))


def test_decode_out_of_kv_preempts_newest_and_recomputes_without_resending():
    engine = Engine(EngineParams(kv_tokens=260, block_size=1, prefill_chunk_tokens=10_000))
    old, new = SimRequest(100, 100), SimRequest(100, 100)
    engine.submit(old)
    engine.submit(new)
    t, emitted = run_to_completion(engine)
    assert engine.stats.preemptions_total >= 1
    assert new.preemptions >= 1 and old.preemptions == 0  # the newest is the victim
    assert emitted == {old: 100, new: 100}  # every token sent exactly once
    assert old.state == FINISHED and new.state == FINISHED
    assert engine.stats.prompt_tokens_total == 200  # a recompute is not a new prompt


def test_abort_frees_kv_from_running_and_waiting():
    engine = Engine(EngineParams(kv_tokens=1000, block_size=1, max_running=1))
    a, b = SimRequest(100, 50), SimRequest(100, 50)
    engine.submit(a)
    engine.submit(b)
    engine.step()
    engine.abort(a)
    engine.abort(b)
    assert engine.kv_used == 0 and engine.idle


def test_speculative_decoding_chunks_carry_several_tokens():
    engine = Engine(EngineParams(spec_accept=(0.0, 0.0, 0.0, 1.0)))
    engine.submit(SimRequest(10, 21))
    sizes = []
    while not engine.idle:
        sizes += [n for _, n, _ in engine.step()[1]]
    assert sizes == [1, 4, 4, 4, 4, 4]  # first token from prefill, then 4 accepted per step


def test_speculative_accept_distribution_is_seeded_and_has_its_mean():
    def sizes(seed):
        engine = Engine(EngineParams(spec_accept=(0.15, 0.25, 0.30, 0.30), seed=seed))
        engine.submit(SimRequest(10, 100_000))
        out = []
        for _ in range(4000):
            out += [n for _, n, _ in engine.step()[1]]
        return out[1:]

    a = sizes(7)
    assert a == sizes(7) and a != sizes(8)
    assert sum(a) / len(a) == pytest.approx(2.75, abs=0.05)


def test_seeds_server_fits_512_concurrent_1000_1000_without_preemption():
    engine = Engine(QWEN)
    for _ in range(512):
        engine.submit(SimRequest(1000, 1000))
    _, emitted = run_to_completion(engine)
    assert engine.stats.preemptions_total == 0
    assert sorted(set(emitted.values())) == [1000] and len(emitted) == 512


def test_seeds_server_at_1024_concurrent_queues_or_preempts():
    engine = Engine(QWEN)
    for _ in range(1024):
        engine.submit(SimRequest(1000, 1000))
    _, emitted = run_to_completion(engine)
    assert engine.stats.preemptions_total > 0
    assert len(emitted) == 1024 and set(emitted.values()) == {1000}


def test_fixed_schedule_known_answer():
    sched = FixedSchedule(ttft_s=0.2, itl_s=0.02, tokens_per_chunk=4)
    req = SimRequest(10, 10)
    sched.submit(req, t_s=1.0)
    assert sched.next_due() == pytest.approx(1.2)
    assert sched.pop_due(1.19) == []
    assert sched.pop_due(1.2) == [(req, 4, False)]
    assert sched.next_due() == pytest.approx(1.28)  # 4 tokens x 20 ms
    assert sched.pop_due(10.0) == [(req, 4, False), (req, 2, True)]
    assert sched.num_running == 0 and sched.kv_used == 0 and sched.next_due() is None


def test_fixed_schedule_drifts_linearly_with_simulated_time():
    """TTFT and the chunk gap grow by their drift fraction per simulated second (docs/soak.md)."""
    sched = FixedSchedule(ttft_s=0.2, itl_s=0.02, tokens_per_chunk=1, ttft_drift_per_s=0.5 / 3600,
                          gap_drift_per_s=1.0 / 3600)
    req = SimRequest(10, 3)
    sched.submit(req, t_s=3600.0)  # one simulated hour in: TTFT x 1.5
    assert sched.next_due() == pytest.approx(3600.3)
    sched.pop_due(3600.3)
    assert sched.next_due() == pytest.approx(3600.3 + 0.02 * (1 + 3600.3 / 3600))  # ITL x ~2


def test_fixed_schedule_abort_and_kv_report():
    sched = FixedSchedule(0.1, 0.01, 1)
    a, b = SimRequest(100, 5), SimRequest(50, 5)
    sched.submit(a, 0.0)
    sched.submit(b, 0.0)
    sched.pop_due(0.1)
    assert sched.kv_used == 152 and sched.num_running == 2
    sched.abort(a)
    assert sched.kv_used == 51 and sched.num_running == 1
    assert all(r is b for r, _, _ in sched.pop_due(1.0))


def test_a_kv_leak_grows_the_reported_kv_use_by_its_rate_per_simulated_hour():
    from prometheus_client.exposition import generate_latest

    from loadgen.sim.config import load
    from loadgen.sim.server import SimServer

    server = SimServer(load("fixed", {"drift_kv_leak_tokens_per_h": 100_000, "kv_tokens": 1_000_000}))
    server.runner.now_s = lambda: 1800.0  # half a simulated hour, nothing running: the leak alone

    def usage() -> float:
        text = generate_latest(server.registry).decode()
        return float(next(line.split()[-1] for line in text.splitlines() if line.startswith("vllm:kv_cache_usage_perc")))

    assert usage() == pytest.approx(0.05)
    server.runner.now_s = lambda: 36000.0 * 10  # never above full
    assert usage() == 1.0


def test_kv_lost_to_a_leak_shrinks_the_pool_admission_sees():
    params = EngineParams(kv_tokens=1000, block_size=10, max_running=8, prefill_chunk_tokens=10_000)
    full, leaky = Engine(params), Engine(params)
    leaky.kv_lost = 700  # a pool of 300: room for one
    for engine in (full, leaky):
        for _ in range(4):
            engine.submit(SimRequest(190, 50))  # 200 tokens of KV each at admission
        engine.step()
    assert (full.num_running, leaky.num_running) == (4, 1) and leaky.num_waiting == 3
