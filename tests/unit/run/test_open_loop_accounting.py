"""The open-loop window's accounting in virtual time, for requests as long as the window.

A stage is played on a fake clock through the product's own parts: the plan (``SweepPlan``: the
warmup, the turnover rule, the window), the seeded schedule (``ArrivalSpec``), the counters
(``Collector``) and the in-flight integral (``InflightMeter``). The glue is what ``Runtime`` and the
dispatcher do: arrivals due from the stage's start (the ramp), an arrival counted in the window if
the window is open when it comes due, an ok request counted when it finishes inside it.

Known answers, from the schedule alone (a_i = ramp + d_i, W_i its duration, [open, close) the window):

    scheduled x w = #{i : open <= a_i < close}
    achieved x w  = #{i : open <= a_i + W_i < close}
    concurrency_mean x w = sum_i |[a_i, a_i + W_i] n [open, close]|

and the laws they make: achieved = scheduled (in expectation; a seeded run differs by the arrivals of
[open - W, open) less those of [close - W, close), sd sqrt(2 rate W) requests), and Little's
concurrency_mean = rate x W, once the warmup lasted one request lifetime.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np
import pytest

from loadgen.phases import Phase
from loadgen.run.kv_guard import decide_rate
from loadgen.run.plan import Observation, PhaseStarted, SweepDone, SweepPlan, WindowClosed, WindowOpened
from loadgen.stats.inflight import InflightMeter
from loadgen.stats.stage_stats import Collector
from loadgen.workload.arrivals import ArrivalSpec

TICK_S = 1.0  # the shape ticks the plan once a second
STAGE = 0


@dataclass
class Played:
    """One virtual stage: the product's figures and what the schedule says they must be."""

    ramp_t: float
    open_t: float
    close_t: float
    arrivals: np.ndarray  # due times, absolute
    durations: np.ndarray
    scheduled: int  # the product's counters
    achieved: int
    inflight_s: float
    warmup_capped: bool = field(default=False)

    @property
    def window_s(self) -> float:
        return self.close_t - self.open_t

    def expected_scheduled(self) -> int:
        return int(np.sum((self.arrivals >= self.open_t) & (self.arrivals < self.close_t)))

    def expected_achieved(self) -> int:
        ends = self.arrivals + self.durations
        return int(np.sum((ends >= self.open_t) & (ends < self.close_t)))

    def expected_inflight_s(self) -> float:
        lo = np.maximum(self.arrivals, self.open_t)
        hi = np.minimum(self.arrivals + self.durations, self.close_t)
        return float(np.sum(np.clip(hi - lo, 0.0, None)))


def play(rate: float, durations, *, arrival: str = "poisson", seed: int = 7, warmup_s: float = 2.0,
         duration_s: float = 60.0, max_warmup_s: float = 600.0) -> Played:
    """One open-loop stage at ``rate`` on a fake clock; ``durations(n)``: the first n requests' E2E."""
    plan = SweepPlan([rate], ramp_s=0, warmup_s=warmup_s, duration_s=duration_s, min_requests=0,
                     max_window_s=10 * duration_s, drain_s=10_000, turnover=True, max_warmup_s=max_warmup_s,
                     users_for=lambda r: 1, decide=lambda r: decide_rate(r, 1.0, None, 10, 10, 0.0, "abort"))
    collector = Collector()
    meter = InflightMeter(collector)
    schedule = ArrivalSpec.for_stage(rate, arrival, 1.0, seed, STAGE).for_part(0, 1)
    due = np.array(schedule.until(50 * duration_s))
    wall = np.asarray(durations(len(due)), dtype=float)
    # (t, order, what, i): at equal times the phase changes first, as the shape ticks before the
    # dispatcher's next look, then completions, then arrivals
    events: list = [(0.0, 0, "tick", 0)]
    measuring, finished_total, finished_stage, ramp_t = None, 0, 0, None
    open_t = close_t = None
    capped = False
    while events:
        t, _, what, i = heapq.heappop(events)
        if what == "tick":
            obs = Observation(now=t, users=1, finished=lambda k, n=finished_stage: n, stage_done=lambda k: True,
                              finished_total=finished_total, inflight=meter.n)
            for ev in plan.tick(obs).events:
                match ev:
                    case PhaseStarted(phase=Phase.RAMP):
                        ramp_t = t  # Runtime.stage_started_s: the schedule's origin
                        for j, d in enumerate(due):
                            heapq.heappush(events, (ramp_t + d, 2, "arrive", j))
                    case WindowOpened(t=t_open):
                        open_t, measuring = t_open, STAGE
                        capped = finished_total < meter.n  # the cap, not the turnover rule, ended the warmup
                        meter.measure(STAGE, t)
                    case WindowClosed(t=t_close):
                        close_t, measuring = t_close, None
                        meter.measure(None, t)
                    case SweepDone():
                        return Played(ramp_t, open_t, close_t, ramp_t + due, wall,
                                      collector.stages[STAGE].scheduled_requests,
                                      collector.stages[STAGE].window_requests,
                                      collector.stages[STAGE].inflight_us / 1e6, capped)
            heapq.heappush(events, (t + TICK_S, 0, "tick", 0))
        elif what == "arrive":
            if plan.kind in (Phase.DRAIN, Phase.DONE):
                continue  # the dispatcher sends nothing once the sweep drains
            collector.request_scheduled(measuring, 0.0)
            collector.request_started(measuring)
            meter.change(+1, t)
            heapq.heappush(events, (t + wall[i], 1, ("finish", measuring), i))
        else:
            stage = what[1]
            collector.request_finished(stage)
            meter.change(-1, t)
            collector.add_window_request(measuring)  # an ok request, counted in the window open now
            finished_total += 1
            finished_stage += stage == STAGE
    raise AssertionError("the sweep did not end")


def fixed(seconds: float):
    return lambda n: np.full(n, seconds)


@pytest.mark.parametrize(("rate", "e2e_s", "window_s"), [(40.0, 1.1, 20.0), (2.0, 30.0, 60.0), (10.0, 45.0, 30.0)])
def test_constant_arrivals_achieve_the_scheduled_rate_and_littles_law_holds(rate, e2e_s, window_s):
    p = play(rate, fixed(e2e_s), arrival="constant", duration_s=window_s)
    w = p.window_s
    assert (p.scheduled, p.achieved) == (p.expected_scheduled(), p.expected_achieved())
    assert p.inflight_s == pytest.approx(p.expected_inflight_s(), abs=1e-3)
    # the turnover rule held the warmup until the population had filled (one lifetime) and turned over
    assert p.open_t - p.ramp_t >= 2 * e2e_s
    # no noise: both counts are rate x w to within the one arrival a boundary can cut
    assert abs(p.scheduled - rate * w) <= 1 and abs(p.achieved - p.scheduled) <= 1
    assert p.inflight_s / w == pytest.approx(rate * e2e_s, abs=1 + rate * e2e_s * 0.01)


@pytest.mark.parametrize(("rate", "e2e_s", "window_s", "seed"),
                         [(40.0, 1.1, 20.0, 1), (2.0, 30.0, 60.0, 2), (2.0, 30.0, 60.0, 3), (10.0, 45.0, 30.0, 4)])
def test_poisson_arrivals_long_requests_known_answers(rate, e2e_s, window_s, seed):
    """Seeded: every count is known from the schedule; achieved and scheduled differ only by the
    arrivals of the window's first and last request lifetimes."""
    p = play(rate, fixed(e2e_s), seed=seed, duration_s=window_s)
    w, lifetime_sd = p.window_s, math.sqrt(2 * rate * e2e_s)
    assert (p.scheduled, p.achieved) == (p.expected_scheduled(), p.expected_achieved())
    assert p.inflight_s == pytest.approx(p.expected_inflight_s(), abs=1e-3)
    assert p.open_t - p.ramp_t >= e2e_s  # the population had filled (about 2 W: finished >= in flight)
    head = np.sum((p.arrivals >= p.open_t - e2e_s) & (p.arrivals < p.open_t))
    tail = np.sum((p.arrivals >= p.close_t - e2e_s) & (p.arrivals < p.close_t))
    assert p.achieved - p.scheduled == head - tail
    assert abs(p.achieved - p.scheduled) < 4 * lifetime_sd  # no bias of rate x e2e (that would be 60 here)
    # Little's law over the window: mean in flight = (arrivals whose lifetime overlaps it) x W / w
    assert p.inflight_s / w == pytest.approx(p.scheduled / w * e2e_s, abs=4 * lifetime_sd * e2e_s / w)


def test_durations_that_vary_little_holds_with_the_mean():
    rng = np.random.default_rng(11)
    p = play(4.0, lambda n: rng.uniform(10.0, 30.0, n), seed=5, duration_s=60.0)
    assert (p.scheduled, p.achieved) == (p.expected_scheduled(), p.expected_achieved())
    assert p.inflight_s == pytest.approx(p.expected_inflight_s(), abs=1e-3)
    assert abs(p.achieved - p.scheduled) < 4 * math.sqrt(2 * 4.0 * 20.0)
    assert p.inflight_s / p.window_s == pytest.approx(4.0 * 20.0, rel=0.15)


def test_a_window_opened_on_an_empty_population_is_short_by_rate_times_e2e():
    """The mechanism of issue 35 in numbers: if the window opens before one request lifetime of
    arrivals is in flight -- here the warmup capped at 0 s with 30 s requests -- nothing finishes
    in the window's first 30 s, and the achieved rate is short by rate x E2E / window (2 x 30 / 60:
    half), while the scheduled rate is right."""
    p = play(2.0, fixed(30.0), arrival="constant", warmup_s=0.0, max_warmup_s=0.0, duration_s=60.0)
    assert p.warmup_capped and p.open_t - p.ramp_t < 30.0
    assert abs(p.scheduled - 2.0 * p.window_s) <= 1
    missing = 2.0 * (30.0 - (p.open_t - p.ramp_t))  # arrivals that would have been finishing
    assert abs(p.scheduled - p.achieved - missing) <= 1
    assert p.achieved / p.window_s < 0.55 * 2.0


def test_the_dispatcher_runs_only_its_schedule():
    """Locust merges a base class's tasks into a subclass's, ``tasks = [...]`` included: the
    dispatcher must not inherit the closed-loop user's task (it once ran it, 1 request in 2, before
    its schedule began, so the window opened with nothing in flight)."""
    from loadgen.locust_face.open_loop import RateUser
    from loadgen.locust_face.users import LLMUser, StreamUser

    assert RateUser.tasks == [RateUser.dispatch]
    assert LLMUser.tasks == [LLMUser.generate]
    assert StreamUser.tasks == [] and StreamUser.abstract


def test_a_stages_arrivals_are_due_from_when_this_process_adopted_it():
    """``Runtime.stage_started_s``, the dispatcher's schedule origin: set when a new stage's first
    phase arrives (its ramp), kept through its warmup, window and closing."""
    from pathlib import Path

    from locust.env import Environment

    from loadgen.config import load_scenario
    from loadgen.run.runtime import Runtime

    rt = Runtime(Environment(), load_scenario(Path(__file__).resolve().parents[3] / "config" / "smoke.yaml", {}))
    rt.set_phase(0, Phase.RAMP)
    ramp = rt.stage_started_s
    for kind in (Phase.WARMUP, Phase.MEASURE, Phase.CLOSING):
        rt.set_phase(0, kind)
        assert rt.stage_started_s == ramp
    rt.set_phase(1, Phase.RAMP)
    assert rt.stage_started_s > ramp


def test_an_arrival_is_measured_by_its_due_time_not_by_when_a_stall_let_it_go():
    """``Runtime.measured_stage``: an arrival due before the window opened belongs to the warmup
    even if the dispatcher sends it after (the process stalled across the opening: the shape's
    tick flipped the phase before the dispatcher caught up); one due in the open window is
    measured; nothing is measured once the window closed."""
    from pathlib import Path

    from locust.env import Environment

    from loadgen.config import load_scenario
    from loadgen.run.runtime import Runtime

    rt = Runtime(Environment(), load_scenario(Path(__file__).resolve().parents[3] / "config" / "smoke.yaml", {}))
    rt.set_phase(0, Phase.WARMUP)
    due_in_warmup = rt.stage_started_s
    assert rt.measured_stage(due_in_warmup) is None
    rt.set_phase(0, Phase.MEASURE)
    assert rt.measured_stage(due_in_warmup) is None  # sent late, after the opening: still warmup
    assert rt.measured_stage(rt.measure_since_s) == 0 and rt.measured_stage(rt.measure_since_s + 5) == 0
    rt.set_phase(0, Phase.CLOSING)
    assert rt.measured_stage(rt.measure_since_s + 5) is None
