"""SweepPlan in open-loop mode (loads are rates): dispatcher users, turnover against in flight."""

from __future__ import annotations

from loadgen.phases import Phase
from loadgen.run.kv_guard import decide_rate
from loadgen.run.plan import Observation, PhaseStarted, SweepDone, SweepPlan, WindowClosed, WindowOpened


def plan(rates, **kw):
    args = dict(ramp_s=5, warmup_s=2, duration_s=10, min_requests=0, max_window_s=100, drain_s=30,
                turnover=True, max_warmup_s=60, users_for=lambda rate: 3,
                decide=lambda r: decide_rate(r, 1.0, None, 10, 10, 0.0, "abort"))
    args.update(kw)
    return SweepPlan(rates, **args)


def obs(now, users=3, finished_total=0, inflight=0, finished=0):
    return Observation(now=now, users=users, finished=lambda k: finished, stage_done=lambda k: True,
                       finished_total=finished_total, inflight=inflight)


def test_users_are_the_dispatchers_and_spawn_at_once():
    p = plan([2.0, 4.0])
    tick = p.tick(obs(0, users=0))
    assert (tick.users, tick.spawn_rate) == (3, 3.0)
    assert PhaseStarted(0, Phase.RAMP, 2.0) in tick.events
    assert p.tick(obs(0.5)).events == [PhaseStarted(0, Phase.WARMUP, 2.0)]  # the ramp ends at once


def test_turnover_counts_against_requests_in_flight():
    """A rate of 10/s with W = 2 s holds 20 in flight: the warmup waits for 20 finished since the
    ramp, the window for 20 finished inside it, though duration_s passed long before."""
    p = plan([10.0])
    p.tick(obs(0, users=0))
    p.tick(obs(1))  # warmup
    assert p.tick(obs(3, finished_total=12, inflight=20)).events == []  # 12 < 20 in flight
    ev = p.tick(obs(4, finished_total=20, inflight=20)).events
    assert ev == [PhaseStarted(0, Phase.MEASURE, 10.0), WindowOpened(0, 4)]
    assert p.tick(obs(15, finished_total=35, inflight=20)).events == []  # 15 finished in the window
    ev = p.tick(obs(16, finished_total=40, inflight=20)).events
    assert WindowClosed(0, 16, 3) in ev
    assert p.tick(obs(16)).events[0] == PhaseStarted(0, Phase.DRAIN, 10.0)


def test_nothing_in_flight_still_needs_one_finished_request():
    p = plan([1.0], warmup_s=0)
    p.tick(obs(0, users=0))
    p.tick(obs(0.1))
    assert p.tick(obs(0.2, finished_total=0, inflight=0)).events == []
    assert p.tick(obs(0.3, finished_total=1, inflight=0)).events[0].phase is Phase.MEASURE


def test_guard_clamps_a_rate_and_it_is_the_last_stage():
    p = plan([1.0, 2.0, 4.0], turnover=False,
             decide=lambda r: decide_rate(r, 10.0, 400, 10, 15, 0.0, "clamp"))  # fits 1.6/s
    events, now = [], 0.0
    while now < 500:
        tick = p.tick(obs(now, finished=100))
        events += tick.events
        if tick.users is None:
            break
        now += 1
    ramps = [e.concurrency for e in events if isinstance(e, PhaseStarted) and e.phase is Phase.RAMP]
    assert ramps == [1.0, 1.6]  # 400 / (10 s x 25 tokens); 4/s never runs
    assert isinstance(events[-1], SweepDone) and events[-1].reason == "completed"
