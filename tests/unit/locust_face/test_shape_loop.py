"""``shape_loop``: Locust's shape loop ticking the sweep every ``TICK_S`` instead of every second, and
the Locust 2.47 internals it stands in for (pinned, so an upgrade that changes them fails here)."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest
from locust.runners import STATE_RUNNING, STATE_STOPPED, Runner

from loadgen.locust_face.shape import shape_loop
from loadgen.run.plan import TICK_S


class FakeRunner:
    """The runner's part shape_loop reads and calls: state, shape_last_tick, start, quit, stop."""

    def __init__(self, ticks: list, headless: bool = True):
        self.state, self.shape_last_tick, self.shape_greenlet = STATE_RUNNING, None, "running"
        self.calls: list = []

        self.environment = SimpleNamespace(shape_class=SimpleNamespace(tick=lambda: ticks.pop(0)),
                                           parsed_options=SimpleNamespace(headless=headless))

    def start(self, user_count, spawn_rate, user_classes=None):
        self.calls.append(("start", user_count, spawn_rate, user_classes))

    def quit(self):
        self.calls.append(("quit",))
        self.state = STATE_STOPPED

    def stop(self):
        self.calls.append(("stop",))
        self.state = STATE_STOPPED


def test_users_start_on_a_change_only_and_the_run_ends_on_none():
    classes = ["LLMUser"]
    runner = FakeRunner([(4, 4.0), (4, 4.0), (8, 8.0, classes), None])
    shape_loop(runner, tick_s=0.0)
    assert runner.calls == [("start", 4, 4.0, None), ("start", 8, 8.0, classes), ("quit",)]
    assert (runner.shape_greenlet, runner.shape_last_tick) == (None, None)


def test_the_web_ui_stops_the_run_instead_of_quitting():
    runner = FakeRunner([(1, 1.0), None], headless=False)
    shape_loop(runner, tick_s=0.0)
    assert runner.calls[-1] == ("stop",)


def test_it_ticks_every_tick_s_not_every_second(monkeypatch):
    """Each pass sleeps what is left of ``TICK_S`` after the shape's tick took its time (a fake
    clock: the tick takes 0.05 s), so the shape is asked 5 times a second, not once (Locust's loop
    sleeps 1 s minus the tick)."""
    import loadgen.locust_face.shape as shape_module

    clock, slept = [0.0], []

    def tick():
        clock[0] += 0.05
        return ticks.pop(0)

    def sleep(s):
        slept.append(s)
        clock[0] += s

    ticks = [(1, 1.0)] * 5 + [None]
    runner = FakeRunner([])
    runner.environment.shape_class = SimpleNamespace(tick=tick)
    monkeypatch.setattr(shape_module.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(shape_module.gevent, "sleep", sleep)
    shape_loop(runner)
    assert TICK_S == 0.2 and slept == [pytest.approx(TICK_S - 0.05)] * 5
    assert clock[0] == pytest.approx(5 * TICK_S + 0.05)  # the sixth tick, at 1 s, ends the run


@pytest.mark.parametrize("name", ["start_shape", "stop"])
def test_locusts_runner_still_runs_the_shape_through_the_attributes_we_set(name):
    source = inspect.getsource(getattr(Runner, name))
    assert {"start_shape": "spawn(self.shape_worker)", "stop": "self.shape_greenlet"}[name] in source
    loop = inspect.getsource(Runner.shape_worker)
    assert "self.shape_last_tick" in loop and "gevent.sleep(max(1 -" in loop  # the loop shape_loop replaces
