"""SweepPlan decisions with a fake clock: no Locust, no sleeps."""

from __future__ import annotations

from loadgen.guard import decide
from shapes.sweep_plan import Observation, SweepPlan

SEEDS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


class FakeRun:
    """Users appear instantly; each stage's requests finish `straggle_s` after its window closes."""

    def __init__(self, capacity=None, action="abort", margin=0.0, straggle_s=3.0, finished_per_s=5):
        self.capacity, self.action, self.margin = capacity, action, margin
        self.straggle_s, self.finished_per_s = straggle_s, finished_per_s
        self.closed_at: dict[int, float] = {}
        self.opened_at: dict[int, float] = {}
        self.users = 0
        self.now = 0.0

    def decide(self, c):
        return decide(c, self.capacity, 1000, 1000, self.margin, self.action)

    def finished(self, k):
        t0 = self.opened_at.get(k)
        return 0 if t0 is None else int((self.now - t0) * self.finished_per_s)

    def stage_done(self, k):
        return k in self.closed_at and self.now >= self.closed_at[k] + self.straggle_s

    def run(self, plan: SweepPlan, limit_s: float = 100_000.0):
        events = []
        while self.now < limit_s:
            tick = plan.tick(Observation(self.now, self.users, self.finished, self.stage_done))
            for ev in tick.events:
                if ev.kind == "window_open":
                    self.opened_at[ev.stage] = ev.data["t"]
                if ev.kind == "window_close":
                    self.closed_at[ev.stage] = ev.data["t"]
                events.append((self.now, ev))
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
    return [ev for _, ev in events if ev.kind == kind]


def test_unguarded_sweep_runs_every_stage_in_order_with_windows():
    fake = FakeRun()
    events = fake.run(plan(fake))
    ramps = [ev.data["concurrency"] for ev in kinds(events, "phase") if ev.data["kind"] == "ramp"]
    assert ramps == SEEDS
    opens = {ev.stage: t for t, ev in events if ev.kind == "window_open"}
    closes = {ev.stage: t for t, ev in events if ev.kind == "window_close"}
    assert all(closes[k] - opens[k] == 10 for k in opens)  # duration_s
    assert [ev.stage for ev in kinds(events, "final")] == list(range(len(SEEDS)))
    assert kinds(events, "done")[0].data["reason"] == "completed"


def test_phases_per_stage_are_ramp_warmup_measure_and_warmup_lasts_warmup_s():
    fake = FakeRun()
    events = fake.run(plan(fake, [4]))
    phases = [(t, ev.data["kind"]) for t, ev in events if ev.kind == "phase"]
    assert [k for _, k in phases] == ["ramp", "warmup", "measure", "drain"]
    t = dict((k, t) for t, k in phases)
    assert t["measure"] - t["warmup"] == 5


def test_seeds_capacity_runs_512_and_refuses_1024_before_it_starts():
    fake = FakeRun(capacity=1_570_000)
    events = fake.run(plan(fake))
    ramps = [ev.data["concurrency"] for ev in kinds(events, "phase") if ev.data["kind"] == "ramp"]
    assert ramps[-1] == 512 and 1024 not in ramps
    refused = [ev for ev in kinds(events, "guard") if not ev.data["decision"].allowed]
    assert [ev.data["concurrency"] for ev in refused] == [1024]
    assert kinds(events, "done")[0].data["reason"] == "guard_abort"
    # every completed stage (C=1..512) still gets its final row after the stop
    assert len(kinds(events, "final")) == 10


def test_clamp_runs_one_last_stage_at_the_largest_fitting_concurrency():
    fake = FakeRun(capacity=1_570_000, action="clamp")
    events = fake.run(plan(fake))
    ramps = [ev.data["concurrency"] for ev in kinds(events, "phase") if ev.data["kind"] == "ramp"]
    assert ramps[-2:] == [512, 785]
    assert kinds(events, "done")[0].data["reason"] == "completed"


def test_warn_runs_the_breaching_stage():
    fake = FakeRun(capacity=1_570_000, action="warn")
    events = fake.run(plan(fake))
    ramps = [ev.data["concurrency"] for ev in kinds(events, "phase") if ev.data["kind"] == "ramp"]
    assert ramps[-1] == 1024
    assert [ev.data["decision"].breach for ev in kinds(events, "guard")][-1] is True


def test_window_extends_until_min_requests_then_caps_at_max_window():
    fake = FakeRun(finished_per_s=1)
    events = fake.run(plan(fake, [1], duration_s=10, min_requests=25, max_window_s=100))
    (t_open,) = [t for t, ev in events if ev.kind == "window_open"]
    (t_close,) = [t for t, ev in events if ev.kind == "window_close"]
    assert t_close - t_open == 25
    fake = FakeRun(finished_per_s=0)
    events = fake.run(plan(fake, [1], duration_s=10, min_requests=25, max_window_s=40))
    (t_open,) = [t for t, ev in events if ev.kind == "window_open"]
    (t_close,) = [t for t, ev in events if ev.kind == "window_close"]
    assert t_close - t_open == 40


def test_stage_is_final_only_when_its_requests_finished_and_drain_waits_for_them():
    fake = FakeRun(straggle_s=30)
    events = fake.run(plan(fake, [1, 2], drain_s=300))
    closes = {ev.stage: t for t, ev in events if ev.kind == "window_close"}
    finals = {ev.stage: t for t, ev in events if ev.kind == "final"}
    assert finals[0] == closes[0] + 30 and finals[1] == closes[1] + 30
    done_t = [t for t, ev in events if ev.kind == "done"][0]
    assert done_t == finals[1]


def test_drain_timeout_forces_final_rows_and_marks_them():
    fake = FakeRun(straggle_s=10_000)
    events = fake.run(plan(fake, [1], drain_s=20))
    (final,) = kinds(events, "final")
    assert final.data["forced"] is True


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
        phases += [(t, ev.data["kind"]) for ev in tick.events if ev.kind == "phase"]
        t += 1
    (t_warm,) = [t for t, k in phases if k == "warmup"]
    (t_meas,) = [t for t, k in phases if k == "measure"]
    assert t_meas == 20 and t_meas - t_warm > 5


def test_turnover_warmup_is_capped():
    fake = FakeRun()
    p = plan(fake, [8], warmup_s=5, turnover=True, max_warmup_s=30)
    t = 0.0
    while p.kind != "measure":
        p.tick(Observation(t, 8, fake.finished, lambda k: True, finished_total=0))
        t += 1
    assert 30 <= t - 1 <= 32  # ramp (1 tick) + the 30 s cap


def test_turnover_window_lasts_until_c_requests_finished_inside_it():
    fake = FakeRun()
    p = plan(fake, [8], warmup_s=0, duration_s=5, turnover=True, max_warmup_s=100)
    t, events = 0.0, []
    while p.kind not in ("drain", "done"):
        finished = 8 * int(t // 20)  # the 8 streams finish together every 20 s
        tick = p.tick(Observation(t, 8, fake.finished, lambda k: True, finished_total=finished))
        events += [(t, ev) for ev in tick.events]
        t += 1
    (t_open,) = [t for t, ev in events if ev.kind == "window_open"]
    (t_close,) = [t for t, ev in events if ev.kind == "window_close"]
    assert (t_open, t_close) == (20, 40)  # one whole cycle, though duration_s is 5


def test_stop_after_a_window_ends_the_sweep_there_and_finishes_its_rows():
    fake = FakeRun()
    p = plan(fake, [1, 2, 4], stop_after=lambda k, t, users: "server_over_capacity" if k == 1 else None)
    events = fake.run(p)
    ramps = [ev.data["concurrency"] for ev in kinds(events, "phase") if ev.data["kind"] == "ramp"]
    assert ramps == [1, 2]
    assert [ev.stage for ev in kinds(events, "final")] == [0, 1]
    assert kinds(events, "done")[0].data["reason"] == "server_over_capacity"
