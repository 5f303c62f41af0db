"""SweepPlan decisions with a fake clock: no Locust, no sleeps."""

from __future__ import annotations

from loadgen.phases import Phase
from loadgen.run.kv_guard import decide
from loadgen.run.plan import (
    GuardDecided,
    Observation,
    PhaseStarted,
    StageFinal,
    SweepDone,
    SweepPlan,
    WindowClosed,
    WindowOpened,
)
from loadgen.slo.objectives import Objectives

SEEDS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


class FakeRun:
    """Users appear instantly; each stage's requests finish `straggle_s` after its window closes."""

    def __init__(self, capacity=None, action="abort", margin=0.0, straggle_s=3.0, finished_per_s=5,
                 stop_at=None, slo_limit=None):
        self.capacity, self.action, self.margin = capacity, action, margin
        self.straggle_s, self.finished_per_s = straggle_s, finished_per_s
        self.stop_at = stop_at or {}  # {stage: reason}: the adapter's answer to WindowClosed
        self.closed_at: dict[int, float] = {}
        self.opened_at: dict[int, float] = {}
        self.users = 0
        self.now = 0.0
        self.slo_limit = slo_limit  # stages with C <= slo_limit pass the SLO
        self.concurrency: dict[int, int] = {}
        self.final: list[int] = []

    def slo_outcomes(self):
        """Like the session: (concurrency, passed) of every stage whose StageFinal was handled."""
        return [(self.concurrency[k], self.concurrency[k] <= self.slo_limit) for k in self.final]

    def decide(self, c):
        return decide(c, self.capacity, 1000, 1000, self.margin, self.action)

    def finished(self, k):
        t0 = self.opened_at.get(k)
        return 0 if t0 is None else int((self.now - t0) * self.finished_per_s)

    def stage_done(self, k):
        return k in self.closed_at and self.now >= self.closed_at[k] + self.straggle_s

    def step(self, plan: SweepPlan, events: list):
        """One plan tick, acting on its events like the shape does."""
        tick = plan.tick(Observation(self.now, self.users, self.finished, self.stage_done,
                                     slo_outcomes=self.slo_outcomes))
        for ev in tick.events:
            if isinstance(ev, PhaseStarted) and ev.phase is Phase.RAMP:
                self.concurrency[ev.stage] = ev.concurrency
            if isinstance(ev, StageFinal):
                self.final.append(ev.stage)
            if isinstance(ev, WindowOpened):
                self.opened_at[ev.stage] = ev.t
            if isinstance(ev, WindowClosed):
                self.closed_at[ev.stage] = ev.t
                if ev.stage in self.stop_at:
                    plan.stop(self.stop_at[ev.stage])
            events.append((self.now, ev))
        return tick

    def run(self, plan: SweepPlan, limit_s: float = 100_000.0):
        events = []
        while self.now < limit_s:
            tick = self.step(plan, events)
            if plan.kind is Phase.CLOSING:  # like the shape: the window was read, go on at once
                tick = self.step(plan, events)
            if tick.users is None:
                return events
            self.users = tick.users
            self.now += 1.0
        raise AssertionError("sweep never ended")


def plan(fake, concurrencies=SEEDS, **kw):
    args = dict(ramp_s=2, warmup_s=5, duration_s=10, min_requests=0, max_window_s=100, drain_s=60)
    args.update(kw)
    return SweepPlan(concurrencies, decide=fake.decide, **args)


def kinds(events, kind):
    return [ev for _, ev in events if isinstance(ev, kind)]


def ramps_of(events):
    return [ev.concurrency for ev in kinds(events, PhaseStarted) if ev.phase is Phase.RAMP]


def test_unguarded_sweep_runs_every_stage_in_order_with_windows():
    fake = FakeRun()
    events = fake.run(plan(fake))
    ramps = ramps_of(events)
    assert ramps == SEEDS
    opens = {ev.stage: t for t, ev in events if isinstance(ev, WindowOpened)}
    closes = {ev.stage: t for t, ev in events if isinstance(ev, WindowClosed)}
    assert all(closes[k] - opens[k] == 10 for k in opens)  # duration_s
    assert [ev.stage for ev in kinds(events, StageFinal)] == list(range(len(SEEDS)))
    assert kinds(events, SweepDone)[0].reason == "completed"


def test_phases_per_stage_are_ramp_warmup_measure_and_warmup_lasts_warmup_s():
    fake = FakeRun()
    events = fake.run(plan(fake, [4]))
    phases = [(t, ev.phase) for t, ev in events if isinstance(ev, PhaseStarted)]
    assert [k for _, k in phases] == ["ramp", "warmup", "measure", "closing", "drain"]
    t = dict((k, t) for t, k in phases)
    assert t["measure"] - t["warmup"] == 5


def test_seeds_capacity_runs_512_and_refuses_1024_before_it_starts():
    fake = FakeRun(capacity=1_570_000)
    events = fake.run(plan(fake))
    ramps = ramps_of(events)
    assert ramps[-1] == 512 and 1024 not in ramps
    refused = [ev for ev in kinds(events, GuardDecided) if not ev.decision.allowed]
    assert [ev.concurrency for ev in refused] == [1024]
    assert kinds(events, SweepDone)[0].reason == "guard_abort"
    # every completed stage (C=1..512) still gets its final row after the stop
    assert len(kinds(events, StageFinal)) == 10


def test_clamp_runs_one_last_stage_at_the_largest_fitting_concurrency():
    fake = FakeRun(capacity=1_570_000, action="clamp")
    events = fake.run(plan(fake))
    ramps = ramps_of(events)
    assert ramps[-2:] == [512, 785]
    assert kinds(events, SweepDone)[0].reason == "completed"


def test_warn_runs_the_breaching_stage():
    fake = FakeRun(capacity=1_570_000, action="warn")
    events = fake.run(plan(fake))
    ramps = ramps_of(events)
    assert ramps[-1] == 1024
    assert [ev.decision.breach for ev in kinds(events, GuardDecided)][-1] is True


def test_window_extends_until_min_requests_then_caps_at_max_window():
    fake = FakeRun(finished_per_s=1)
    events = fake.run(plan(fake, [1], duration_s=10, min_requests=25, max_window_s=100))
    (t_open,) = [t for t, ev in events if isinstance(ev, WindowOpened)]
    (t_close,) = [t for t, ev in events if isinstance(ev, WindowClosed)]
    assert t_close - t_open == 25
    fake = FakeRun(finished_per_s=0)
    events = fake.run(plan(fake, [1], duration_s=10, min_requests=25, max_window_s=40))
    (t_open,) = [t for t, ev in events if isinstance(ev, WindowOpened)]
    (t_close,) = [t for t, ev in events if isinstance(ev, WindowClosed)]
    assert t_close - t_open == 40


def test_stage_is_final_only_when_its_requests_finished_and_drain_waits_for_them():
    fake = FakeRun(straggle_s=30)
    events = fake.run(plan(fake, [1, 2], drain_s=300))
    closes = {ev.stage: t for t, ev in events if isinstance(ev, WindowClosed)}
    finals = {ev.stage: t for t, ev in events if isinstance(ev, StageFinal)}
    assert finals[0] == closes[0] + 30 and finals[1] == closes[1] + 30
    done_t = [t for t, ev in events if isinstance(ev, SweepDone)][0]
    assert done_t == finals[1]


def test_drain_timeout_forces_final_rows_and_marks_them():
    fake = FakeRun(straggle_s=10_000)
    events = fake.run(plan(fake, [1], drain_s=20))
    (final,) = kinds(events, StageFinal)
    assert final.forced is True


def test_ramp_gives_up_waiting_for_users_that_never_arrive():
    fake = FakeRun()

    p = plan(fake, [8], ramp_s=2)
    t, users = 0.0, 3  # a lost worker: only 3 of 8 users ever run
    while True:
        p.tick(Observation(t, users, fake.finished, lambda k: True))
        if p.kind != "ramp":
            break
        t += 1
    assert t == 2 * 4 + 10


def test_turnover_warmup_waits_until_every_stream_finished_once():
    """C=8 users; requests take 20 s: warmup lasts until 8 requests finished since the ramp."""
    fake = FakeRun()
    p = plan(fake, [8], warmup_s=5, turnover=True, max_warmup_s=100)
    t, finished, phases = 0.0, 0, []
    while p.kind != "measure":
        finished = 8 * int(t // 20)  # all 8 streams finish together every 20 s
        tick = p.tick(Observation(t, 8, fake.finished, lambda k: True, finished_total=finished))
        phases += [(t, ev.phase) for ev in tick.events if isinstance(ev, PhaseStarted)]
        t += 1
    (t_warm,) = [t for t, k in phases if k == "warmup"]
    (t_meas,) = [t for t, k in phases if k == "measure"]
    assert t_meas == 20 and t_meas - t_warm > 5


def test_turnover_warmup_is_capped_and_the_window_opened_by_the_cap_says_so():
    fake = FakeRun()
    p = plan(fake, [8], warmup_s=5, turnover=True, max_warmup_s=30)
    t, opened = 0.0, []
    while p.kind != "measure":
        tick = p.tick(Observation(t, 8, fake.finished, lambda k: True, finished_total=0))
        opened += [ev for ev in tick.events if isinstance(ev, WindowOpened)]
        t += 1
    assert 30 <= t - 1 <= 32  # ramp (1 tick) + the 30 s cap
    assert [ev.capped for ev in opened] == [True]  # no stream finished: the stage is warmup_capped


def test_a_window_opened_by_the_turnover_or_without_one_is_not_capped():
    for turnover, finished_after_s in ((True, 20), (False, 10_000)):
        fake = FakeRun()
        p = plan(fake, [8], warmup_s=5, turnover=turnover, max_warmup_s=100)
        t, opened = 0.0, []
        while p.kind != "measure":
            finished = 8 * int(t // finished_after_s)
            tick = p.tick(Observation(t, 8, fake.finished, lambda k: True, finished_total=finished))
            opened += [ev for ev in tick.events if isinstance(ev, WindowOpened)]
            t += 1
        assert [ev.capped for ev in opened] == [False], turnover


def test_turnover_window_lasts_until_c_requests_finished_inside_it():
    fake = FakeRun()
    p = plan(fake, [8], warmup_s=0, duration_s=5, turnover=True, max_warmup_s=100)
    t, events = 0.0, []
    while p.kind not in ("drain", "done"):
        finished = 8 * int(t // 20)  # the 8 streams finish together every 20 s
        tick = p.tick(Observation(t, 8, fake.finished, lambda k: True, finished_total=finished))
        events += [(t, ev) for ev in tick.events]
        t += 1
    (t_open,) = [t for t, ev in events if isinstance(ev, WindowOpened)]
    (t_close,) = [t for t, ev in events if isinstance(ev, WindowClosed)]
    assert (t_open, t_close) == (20, 40)  # one whole cycle, though duration_s is 5


def test_stop_on_a_closed_window_ends_the_sweep_there_and_finishes_its_rows():
    fake = FakeRun()
    fake = FakeRun(stop_at={1: "server_over_capacity"})
    p = plan(fake, [1, 2, 4])
    events = fake.run(p)
    ramps = ramps_of(events)
    assert ramps == [1, 2]
    assert [ev.stage for ev in kinds(events, StageFinal)] == [0, 1]
    assert kinds(events, SweepDone)[0].reason == "server_over_capacity"


def test_a_closed_window_waits_in_closing_for_the_adapters_answer():
    """The plan reads nothing: it says the window closed and goes on at its next tick."""
    fake, events = FakeRun(), []
    p = plan(fake, [1, 2])
    while not kinds(events, WindowClosed):
        tick = fake.step(p, events)
        fake.users = tick.users
        fake.now += 1
    t_close = fake.now - 1
    assert p.kind is Phase.CLOSING and tick.users == 1  # the stage's users keep running meanwhile
    assert [ev for t, ev in events if t == t_close] == [PhaseStarted(0, Phase.CLOSING, 1),
                                                        WindowClosed(0, t_close, 1)]
    after = fake.step(p, events)  # no stop(): the next stage
    assert [type(ev) for _, ev in events[-2:]] == [GuardDecided, PhaseStarted]
    assert events[-1][1] == PhaseStarted(1, Phase.RAMP, 2) and after.users == 2


# --- the SLO search -------------------------------------------------------------------------------

SEARCH = Objectives(tpot_s=0.045, search=True, resolution=0.1, max_search_stages=10)


def test_search_bisects_after_the_whole_sweep_from_final_stages_only():
    """C <= 35 passes: the sweep runs to 64 (the failures at 48+ do not stop it), then 48, 40, 36, 34."""
    fake = FakeRun(slo_limit=35, straggle_s=7)
    events = fake.run(plan(fake, [1, 2, 4, 8, 16, 32, 64], slo=SEARCH))
    assert ramps_of(events) == [1, 2, 4, 8, 16, 32, 64, 48, 40, 36, 34]
    ramps = [(t, ev) for t, ev in events if isinstance(ev, PhaseStarted) and ev.phase is Phase.RAMP]
    assert [ev.search for _, ev in ramps] == [False] * 7 + [True] * 4
    finals = {ev.stage: t for t, ev in events if isinstance(ev, StageFinal)}
    closes = {ev.stage: t for t, ev in events if isinstance(ev, WindowClosed)}
    for t, ev in ramps[1:]:
        # with objectives set every stage, search or not, starts once the one before it is final
        # (7 s after its window closed), so no measured request runs under the next stage's load
        assert finals[ev.stage - 1] <= t and t - closes[ev.stage - 1] >= 7
    # every search stage has the guard's decision and the same ramp/warmup/window rules
    assert [ev.concurrency for ev in kinds(events, GuardDecided)][7:] == [48, 40, 36, 34]
    opens = {ev.stage: t for t, ev in events if isinstance(ev, WindowOpened)}
    assert all(closes[k] - opens[k] == 10 for k in range(11))
    assert kinds(events, SweepDone)[0].reason == "completed"
    assert sorted(fake.final) == list(range(11))


def test_while_the_search_waits_the_last_stage_keeps_its_users_and_nothing_is_measured():
    fake, events = FakeRun(slo_limit=3, straggle_s=20), []
    p = plan(fake, [2, 4], slo=SEARCH)
    while len(kinds(events, WindowClosed)) < 2:
        fake.users = fake.step(p, events).users
        fake.now += 1
    waiting = []
    for _ in range(15):  # stage 1's requests finish 20 s after its window closed
        tick = fake.step(p, events)
        waiting.append((p.kind, tick.users))
        fake.users = tick.users
        fake.now += 1
    assert set(waiting) == {(Phase.CLOSING, 4)}
    events += fake.run(p)
    assert ramps_of(events) == [2, 4, 3]
    assert [ev.search for ev in kinds(events, PhaseStarted) if ev.phase is Phase.RAMP] == [False, False, True]


def test_a_search_ramp_that_lowers_users_ends_once_at_most_c_run():
    """Locust stops users over a few ticks: the ramp to 48 waits until no more than 48 run."""
    fake, events = FakeRun(slo_limit=40, straggle_s=0), []
    p = plan(fake, [32, 64], slo=Objectives(tpot_s=1, search=True, max_search_stages=1))
    while not [ev for _, ev in events if isinstance(ev, PhaseStarted) and ev.search]:
        fake.users = fake.step(p, events).users
        fake.now += 1
    assert p.kind is Phase.RAMP and p.target == 48
    for users in (64, 60, 52):
        fake.users = users
        fake.step(p, events)
        fake.now += 1
        assert p.kind is Phase.RAMP
    fake.users = 48
    fake.step(p, events)
    assert p.kind is Phase.WARMUP


def test_search_below_a_guard_stop_still_runs_and_the_sweep_reports_guard_abort():
    fake = FakeRun(capacity=1_570_000, slo_limit=300)
    events = fake.run(plan(fake, SEEDS, slo=Objectives(tpot_s=1, search=True, max_search_stages=2)))
    ramps = ramps_of(events)
    assert ramps == SEEDS[:10] + [384, 320]  # bracket [256, 512] -> 384 fails -> 320 passes
    assert kinds(events, SweepDone)[0].reason == "guard_abort"
    assert [ev.concurrency for ev in kinds(events, GuardDecided) if not ev.decision.allowed] == [1024]


def test_no_search_when_nothing_passed_everything_passed_or_search_is_off():
    for limit in (0, 10_000):
        fake = FakeRun(slo_limit=limit)
        assert ramps_of(fake.run(plan(fake, [1, 2, 4], slo=SEARCH))) == [1, 2, 4]
    fake = FakeRun(slo_limit=3)
    off = Objectives(tpot_s=0.045, search=False)
    assert ramps_of(fake.run(plan(fake, [1, 2, 4], slo=off))) == [1, 2, 4]


def test_the_wait_for_a_final_stage_is_bounded_by_drain_s():
    fake = FakeRun(slo_limit=3, straggle_s=10_000)
    events = fake.run(plan(fake, [2, 4], slo=SEARCH, drain_s=20))
    assert ramps_of(events) == [2, 4]  # stage 0 never became final: no outcome, no search
    ramp_t = [t for t, ev in events if isinstance(ev, PhaseStarted) and ev.phase is Phase.RAMP]
    close_t = [t for t, ev in events if isinstance(ev, WindowClosed)]
    assert ramp_t[1] - close_t[0] == 20
    assert [ev.forced for ev in kinds(events, StageFinal)] == [True, True]


def test_without_objectives_the_next_stage_does_not_wait():
    fake = FakeRun(straggle_s=30)
    events = fake.run(plan(fake, [2, 4]))
    ramp_t = [t for t, ev in events if isinstance(ev, PhaseStarted) and ev.phase is Phase.RAMP]
    close_t = [t for t, ev in events if isinstance(ev, WindowClosed)]
    assert ramp_t[1] == close_t[0]


def test_a_long_window_is_not_cut_at_max_window_s():
    """A soak's --stage-duration (hours, days) with the default stages.max_window_s (900 s): the
    window lasts as long as asked; max_window_s caps only an extension (min_requests, turnover)."""
    fake = FakeRun()
    fake.run(plan(fake, [1], duration_s=7200, max_window_s=900))
    assert fake.closed_at[0] - fake.opened_at[0] == 7200
