"""The run's KV guard (loadgen.run.stage_guard): which numbers reach the pure decision."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from loadgen.config import load_scenario
from loadgen.run.stage_guard import StageGuard
from loadgen.server.replies import Capacity

ROOT = Path(__file__).resolve().parents[3]


def guard_for(overrides: dict, capacity: int | None, workers=(), master=False) -> StageGuard:
    sc = load_scenario(ROOT / "config" / "default.yaml", overrides)
    rt = SimpleNamespace(scenario=sc, dataset=None, redact=str)
    fleet = SimpleNamespace(master=master, live_workers=lambda: list(workers))
    g = StageGuard(rt, fleet, say=lambda line: None)
    g.capacity = None if capacity is None else Capacity(capacity, "scenario", None, None, "test")
    return g


def test_closed_loop_projects_concurrency_times_input_plus_output():
    g = guard_for({}, 1_570_000)  # the server: 1.57M tokens at 1000 + 1000
    assert g.decide(512).allowed and not g.decide(1024).allowed


def test_no_capacity_allows_every_stage():
    assert guard_for({}, None).decide(1024).allowed


def test_open_loop_uses_littles_law_with_the_learned_duration():
    g = guard_for({"rate": {"list": [10, 100]}}, 200_000)
    g.learn(SimpleNamespace(e2e_s=SimpleNamespace(count=10, mean=2.0)))
    assert g.expected_duration_s == 2.0
    assert g.decide(10).allowed  # 10/s x 2 s = 20 in flight x 2000 tokens = 40k
    assert not g.decide(100).allowed  # 200 in flight x 2000 = 400k > 200k
    g.learn(SimpleNamespace(e2e_s=SimpleNamespace(count=10, mean=1.0)))
    assert g.expected_duration_s == 2.0, "never below a lower rate's duration"
    g.learn(SimpleNamespace(e2e_s=SimpleNamespace(count=0, mean=0.0)))
    assert g.expected_duration_s == 2.0, "a stage without finished requests teaches nothing"


def test_open_loop_uses_one_dispatcher_per_live_worker():
    assert guard_for({}, None, workers=("a", "b", "c"), master=True).load_processes() == 3
    assert guard_for({}, None, workers=(), master=True).load_processes() == 1
    assert guard_for({}, None).load_processes() == 1
