"""The what-if is played by the run's own plan (``loadgen.run.plan.plan_of``): a change to a plan rule
reaches the run's shape and the prediction alike, and the plan's SLO search is predicted."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from loadgen.config import build_scenario
from loadgen.locust_face.shape import SweepShape
from loadgen.run.plan import Observation, SweepPlan, WindowClosed, WindowOpened
from loadgen.sim.config import load
from loadgen.whatif.__main__ import main
from loadgen.whatif.virtual_sweep import _allow, run_sweep, stage_rules

LINEAR = load("slo-linear").engine_params()  # TPOT(C) = 10 ms + 1 ms x C in lockstep
# 2000-token requests live ~28 s at C=4: no request finishes before max_warmup_s + max_window_s
RULES = {"ramp_s": 0, "warmup_s": 1, "duration_s": 3, "max_warmup_s": 5, "max_window_s": 20, "turnover": True}


def _shape_window(rules: dict) -> float:
    """The window of the run's plan, built by the sweep shape, ticked once a second while no request
    finishes (4 users running)."""
    shape = SweepShape.__new__(SweepShape)
    shape.session = SimpleNamespace(stage_guard=SimpleNamespace(decide=_allow, load_processes=lambda rate: 1))
    plan = shape._build_plan(SimpleNamespace(scenario=build_scenario({"stages": {"list": [4], **rules}})))
    opened = None
    for t in range(100):
        for ev in plan.tick(Observation(now=float(t), users=4, finished=lambda k: 0, stage_done=lambda k: False)).events:
            if isinstance(ev, WindowOpened):
                opened = ev.t
            if isinstance(ev, WindowClosed):
                return ev.t - opened
    raise AssertionError("the window never closed")


@pytest.mark.parametrize("turnover_rule", [True, False])
def test_a_plan_rule_changed_changes_the_run_and_the_prediction_alike(turnover_rule, monkeypatch):
    """The window's turnover rule as it is (the window lasts until max_window_s, 20 s: no request
    finished in it), then replaced in SweepPlan alone (the window closes at duration_s, 3 s): both
    the shape's plan and the what-if's change, and they agree."""
    if not turnover_rule:
        monkeypatch.setattr(SweepPlan, "_turned_over", lambda self, obs: True)
    run = _shape_window(RULES)
    (predicted,) = run_sweep(LINEAR, [4], 100, 2000, stage_rules(**RULES))
    assert run == pytest.approx(predicted.window_s) and run == (20.0 if turnover_rule else 3.0)


def test_the_what_if_predicts_the_slo_search_s_stages(tmp_path):
    """tpot_s = 0.045 holds for C <= 35 (10 + C ms): after 16, 32 (pass) and 64 (fail), the plan's
    bisection measures 48, 40, 36 (fail) and 34 (pass), and stops within slo.resolution (2 / 34)."""
    out = tmp_path / "out"
    assert main(["whatif", "slo-linear", "--input-tokens", "100", "--output-tokens", "50", "--stages", "16,32,64",
                 "--slo", "tpot_s=0.045", "--slo-search", "--warmup-s", "1", "--duration-s", "3",
                 "--out", str(out), "--no-plots"]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert [(r["concurrency"], r["search"], r["slo"]["pass"]) for r in s["stages"]] == [
        (16, False, True), (32, False, True), (64, False, False),
        (48, True, False), (40, True, False), (36, True, False), (34, True, True)]
    assert all("slo_search" in r["flags"] and r["predicted"] for r in s["stages"][3:])
    assert s["slo"]["max_concurrency"] == 34 and s["slo"]["bracket"] == [34, 36]
    assert s["slo"]["search"]["stages"] == [48, 40, 36, 34] and s["slo"]["search"]["converged"]


def test_the_what_if_predicts_the_early_stop(tmp_path):
    """--slo-early-stop: C=64 misses tpot_s = 0.045 (74 ms) with every request, and the plan's early
    stop, reading the live StageStats the virtual requests are counted in, closes its 60 s window
    once the verdict is decided (the first tick after 7.3 s); without it the window runs its 60 s."""
    rows = {}
    for extra in ([], ["--slo-early-stop"]):
        out = tmp_path / str(len(extra))
        assert main(["whatif", "slo-linear", "--input-tokens", "100", "--output-tokens", "50", "--stages", "16,64",
                     "--slo", "tpot_s=0.045", *extra, "--warmup-s", "1", "--duration-s", "60",
                     "--out", str(out), "--no-plots"]) == 0
        rows[bool(extra)] = json.loads((out / "summary.json").read_text())["stages"][1]
    assert rows[False]["window_s"] == pytest.approx(60.0) and "slo_early" not in rows[False]["flags"]
    early = rows[True]
    assert early["window_s"] == pytest.approx(7.4) and {"slo_early", "slo_fail", "predicted"} <= set(early["flags"])
    assert early["slo"]["early_stop"]["verdict"] == "fail" and early["slo"]["early_stop"]["agrees"]


def test_spread_runs_match_stages_by_load_when_the_search_differs():
    """--spread with --slo-search: each run's stages are matched by load (a search stage another run
    did not measure has fewer runs), never by position."""
    from loadgen.slo.objectives import Objectives
    from loadgen.whatif.summary import WhatIf, predict

    s = predict(load("slo-linear"), WhatIf(100, 50, (16, 32, 64), stages=stage_rules(warmup_s=1, duration_s=3),
                                           objectives=Objectives(tpot_s=0.045, search=True), spread=2))
    for row in s["stages"]:
        runs = row["spread_runs"]["tpot_p50_s"]
        assert 1 <= len(runs) <= 3 and runs[0] <= row["tpot_p50_s"] <= runs[-1]
    assert [r["concurrency"] for r in s["stages"]][:3] == [16, 32, 64] and s["stages"][-1]["search"]


def test_a_search_stage_above_the_last_one_asks_stopped_users_back():
    """tpot_s = 0.0555 holds for C <= 45: 64 fails, 48 fails, 40 passes, then the search goes up to
    44 (passes; 44..48 is within slo.resolution): the four users stopped at 40 are asked back,
    each once, and the stage runs its 44 with its window on time."""
    from loadgen.slo.objectives import Objectives
    from loadgen.whatif.summary import WhatIf, predict

    s = predict(load("slo-linear"), WhatIf(100, 50, (16, 32, 64), stages=stage_rules(warmup_s=1, duration_s=3),
                                           objectives=Objectives(tpot_s=0.0555, search=True)))
    assert [(r["concurrency"], r["slo"]["pass"]) for r in s["stages"][3:]] == [(48, False), (40, True), (44, True)]
    last = s["stages"][-1]
    assert last["server"]["running_max"] == 44 and last["window_s"] == 3.0 and s["slo"]["max_concurrency"] == 44
