"""SweepPlan's early stop (slo.early_stop) with a fake clock: a stage whose SLO verdict is decided
closes its window before duration_s; an undecided one runs its full window."""

from __future__ import annotations

from loadgen.phases import Phase
from loadgen.run.plan import Observation, PhaseStarted, WindowClosed, WindowOpened
from loadgen.slo.early import LOOKS, LiveCounts, pass_count
from loadgen.slo.objectives import Objectives
from tests.unit.run.test_sweep_plan import FakeRun, kinds, plan

EARLY = Objectives(tpot_s=1, attainment=0.9, early_stop=True, confidence=0.95)


class LiveRun(FakeRun):
    """Each stage's requests finish at ``finished_per_s`` from its window's open, C more always
    running; a share ``share[C]`` of the finished ones met the objectives."""

    def __init__(self, share: dict[int, float], **kw):
        super().__init__(finished_per_s=10, straggle_s=2, **kw)
        self.share = share

    def live(self, k):
        n = self.finished(k)
        return LiveCounts(n, round(n * self.share[self.concurrency[k]]), int(self.concurrency[k]))

    def step(self, plan, events):
        # FakeRun.step with the live counts in the observation
        tick = plan.tick(Observation(self.now, self.users, self.finished, self.stage_done,
                                     finished_total=int(self.now * 10), slo_outcomes=self.slo_outcomes,
                                     slo_live=self.live))
        for ev in tick.events:
            if isinstance(ev, PhaseStarted) and ev.phase is Phase.RAMP:
                self.concurrency[ev.stage] = ev.concurrency
            if isinstance(ev, WindowOpened):
                self.opened_at[ev.stage] = ev.t
            if isinstance(ev, WindowClosed):
                self.closed_at[ev.stage] = ev.t
            events.append((self.now, ev))
        return tick


def windows(events):
    opens = {ev.stage: t for t, ev in events if isinstance(ev, WindowOpened)}
    return {ev.stage: (t - opens[ev.stage], ev.early) for t, ev in events if isinstance(ev, WindowClosed)}


def test_a_clearly_failing_and_a_clearly_passing_stage_close_early_an_undecided_one_runs_its_window():
    # C=4: every request meets the objectives; C=8: none does; C=16: exactly 90 %, the target
    fake = LiveRun({4: 1.0, 8: 0.0, 16: 0.9})
    w = windows(fake.run(plan(fake, [4, 8, 16], duration_s=60, slo=EARLY)))
    (pass_s, passed), (fail_s, failed), (full_s, undecided) = w[0], w[1], w[2]
    # 1 s: 10 finished (none met), 8 running: n = 18 >= the look at 16, of which at most 8 met
    assert failed.verdict == "fail" and fail_s == 1
    assert failed.bounds[0].key == "attainment" and failed.bounds[0].bound <= 0.9
    # a pass counts the 4 running as misses: 10 t - (10 t + 4 - 128) >= s_pass(128) once 10 t + 4 >= 128
    assert pass_count(128, 0.9, 0.05 / LOOKS) <= 124 and pass_s == 13 and passed.verdict == "pass"
    assert passed.bounds[0].bound >= 0.9 and passed.requests == 134
    assert full_s == 60 and undecided is None


def test_an_early_close_still_waits_for_min_requests_and_the_turnover():
    fake = LiveRun({8: 0.0})
    w = windows(fake.run(plan(fake, [8], duration_s=60, min_requests=50, slo=EARLY)))
    assert w[0][0] == 5 and w[0][1].verdict == "fail"  # decided at 1 s, 50 finished at 5 s
    fake = LiveRun({64: 0.0})  # turnover: 64 requests (10 a second) finished inside the window
    w = windows(fake.run(plan(fake, [64], duration_s=60, turnover=True, slo=EARLY)))
    assert w[0][0] == 7 and w[0][1].verdict == "fail"


def test_without_the_option_or_without_live_counts_every_window_runs_duration_s():
    fake = LiveRun({4: 1.0, 8: 0.0})
    off = Objectives(tpot_s=1, attainment=0.9)
    assert {d for d, _ in windows(fake.run(plan(fake, [4, 8], duration_s=30, slo=off))).values()} == {30}
    fake = FakeRun(finished_per_s=10, straggle_s=2)  # the adapter gives no counts (slo_live: None)
    events = fake.run(plan(fake, [4, 8], duration_s=30, slo=EARLY))
    assert {d for d, _ in windows(events).values()} == {30}
    assert all(ev.early is None for ev in kinds(events, WindowClosed))


def test_open_loop_rate_stages_stop_early_by_the_same_rule():
    fake = LiveRun({2.0: 1.0, 8.0: 0.0})
    w = windows(fake.run(plan(fake, [2.0, 8.0], duration_s=60, users_for=lambda rate: 1, slo=EARLY)))
    assert w[0][1].verdict == "pass" and w[0][0] < 60
    assert w[1][1].verdict == "fail" and w[1][0] < 60
