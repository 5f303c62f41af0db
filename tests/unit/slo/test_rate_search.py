"""The SLO search in open-loop mode: it bisects the offered rate (loadgen.slo.objectives, loadgen.run.plan)."""

from __future__ import annotations

from loadgen.config import build_scenario
from loadgen.phases import Phase
from loadgen.report.slo_line import slo_line
from loadgen.run.kv_guard import decide_rate
from loadgen.run.plan import GuardDecided, Observation, PhaseStarted, SweepDone, SweepPlan, WindowClosed
from loadgen.run.results import summary_slo
from loadgen.slo.objectives import Objectives
from loadgen.slo.search import converged, next_search_concurrency

SEARCH = Objectives(tpot_s=0.045, search=True, resolution=0.1, max_search_stages=4)


def test_a_rate_bracket_is_bisected_at_its_midpoint_to_three_digits_and_has_no_unit_step():
    assert next_search_concurrency([(8.0, True), (16.0, False)], SEARCH, 0, rate=True) == 12.0
    assert next_search_concurrency([(1.0, True), (1.3, False)], SEARCH, 0, rate=True) == 1.15
    assert next_search_concurrency([(0.1, True), (0.2, False)], SEARCH, 0, rate=True) == 0.15
    # the concurrency rule stops at a 1-user step; a rate bracket of 4..5 req/s is still 25 % wide
    assert converged(4, 5, 0.1) and not converged(4.0, 5.0, 0.1, rate=True)
    assert next_search_concurrency([(4.0, True), (5.0, False)], SEARCH, 0, rate=True) == 4.5
    assert next_search_concurrency([(13.0, True), (14.0, False)], SEARCH, 0, rate=True) is None  # 1 <= 1.3
    assert next_search_concurrency([(8.0, True), (16.0, False)], SEARCH, 4, rate=True) is None  # stages spent


def test_the_search_is_allowed_with_rate_stages():
    s = build_scenario({"rate": {"list": [4, 8, 16]}, "slo": {"tpot_p50_s": 0.045, "search": True}})
    assert s.open_loop and s.slo.search


class FakeRateRun:
    """Rate stages whose verdict is known: a stage passes when its rate <= ``limit``; every stage's
    requests finish at once (final at its close)."""

    def __init__(self, limit: float):
        self.limit, self.now, self.rows = limit, 0.0, []
        self.loads: dict[int, float] = {}

    def outcomes(self):
        return [(self.loads[k], self.loads[k] <= self.limit) for k in sorted(self.loads) if k in self.closed]

    def run(self, plan: SweepPlan) -> list:
        self.closed, events = set(), []
        for _ in range(100_000):
            obs = Observation(now=self.now, users=1, finished=lambda k: 10**6, stage_done=lambda k: True,
                              finished_total=10**6 + int(self.now), inflight=1, slo_outcomes=self.outcomes)
            tick = plan.tick(obs)
            for ev in tick.events:
                if isinstance(ev, PhaseStarted) and ev.phase is Phase.RAMP:
                    self.loads[ev.stage] = ev.concurrency
                if isinstance(ev, WindowClosed):
                    self.closed.add(ev.stage)
            events += tick.events
            if tick.users is None:
                return events
            self.now += 1
        raise AssertionError("the plan never ended")


def test_the_plan_bisects_the_offered_rate_after_the_sweep_with_the_rate_guard():
    fake = FakeRateRun(limit=19.0)
    decided = []

    def decide(rate):
        decided.append(rate)
        return decide_rate(rate, 1.0, None, 10, 10, 0.0, "abort")

    plan = SweepPlan([4.0, 8.0, 16.0, 32.0], ramp_s=0, warmup_s=1, duration_s=2, min_requests=0,
                     max_window_s=10, drain_s=5, decide=decide, turnover=False, users_for=lambda r: 1,
                     slo=SEARCH)
    events = fake.run(plan)
    ramps = [ev for ev in events if isinstance(ev, PhaseStarted) and ev.phase is Phase.RAMP]
    # [16, 32] -> 24 fails -> 20 fails -> 18 passes -> 19 passes: [19, 20] is within 10 % of 19
    assert [(ev.concurrency, ev.search) for ev in ramps] == [
        (4.0, False), (8.0, False), (16.0, False), (32.0, False), (24.0, True), (20.0, True), (18.0, True),
        (19.0, True)]
    assert [ev.concurrency for ev in events if isinstance(ev, GuardDecided)] == decided[:8]
    assert [ev for ev in events if isinstance(ev, SweepDone)] == [SweepDone("completed")]


def test_the_answer_of_a_rate_search_is_said_in_requests_per_s():
    def row(rate, passed, search=False):
        return {"concurrency": None, "offered_rate_per_s": rate, "search": search,
                "slo": {"pass": passed, "attainment": 1.0 if passed else 0.0}}

    rows = [row(8.0, True), row(16.0, True), row(32.0, False), row(24.0, False, True), row(20.0, True, True)]
    sc = build_scenario({"rate": {"list": [8, 16, 32]}, "slo": {"tpot_s": 0.045, "search": True,
                                                                  "max_search_stages": 2}})
    answer = summary_slo(rows, sc.slo, "offered_rate_per_s")
    assert answer["load"] == "rate_per_s" and answer["bracket"] == [20.0, 24.0]
    assert answer["search"]["stages"] == [24.0, 20.0] and answer["search"]["converged"] is False
    line = slo_line(answer)
    assert line.startswith("SLO: max rate 20 req/s (99% of requests met tpot_s <= 0.045; 24 req/s did not;")
    assert "search stages 24, 20 req/s (search stopped at slo.max_search_stages" in line


def test_the_web_uis_run_tab_shows_the_limits_and_a_rate_search():
    from loadgen.locust_face.webui import slo_items

    answer = {"load": "rate_per_s", "objectives": {}, "limits": {"tpot_p50_s": 0.045}, "attainment_target": 0.99,
              "bracket": [19.0, 20.5], "search": {"stages": [19.0, 20.5]}}
    items = dict(slo_items(answer))
    assert items["SLO objectives"] == "none per request (99% of requests must succeed)"
    assert items["SLO percentile limits"] == "tpot_p50_s <= 0.045"
    assert items["SLO max rate"] == "19 req/s" and items["SLO search stages (req/s)"] == "19, 20.5"
    closed = dict(slo_items(dict(answer, load="concurrency", objectives={"ttft_s": 2}, limits=None,
                                 bracket=[32, 48], search={"stages": [48]})))
    assert closed["SLO objectives"] == "ttft_s <= 2 for 99% of requests" and "SLO percentile limits" not in closed
    assert closed["SLO search stages (C)"] == "48"
