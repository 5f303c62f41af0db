"""``shape_loop``: Locust's shape loop ticking the sweep every ``TICK_S`` instead of every second, and
the Locust 2.47 internals it stands in for (pinned, so an upgrade that changes them fails here)."""

from __future__ import annotations

import inspect
import itertools
import time
from types import SimpleNamespace

import gevent
import pytest
from locust.runners import STATE_RUNNING, STATE_STOPPED, Runner

from loadgen.locust_face.shape import shape_loop
from loadgen.run.plan import TICK_S


class FakeRunner:
    """The runner's part shape_loop reads and calls: state, shape_last_tick, start, quit, stop."""

    def __init__(self, ticks: list, headless: bool = True):
        self.state, self.shape_last_tick, self.shape_greenlet = STATE_RUNNING, None, "running"
        self.calls: list = []
        self.tick_times: list[float] = []

        def tick():
            self.tick_times.append(time.monotonic())
            return ticks.pop(0)

        self.environment = SimpleNamespace(shape_class=SimpleNamespace(tick=tick),
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


def test_it_ticks_every_tick_s_not_every_second():
    runner = FakeRunner([(1, 1.0)] * 5 + [None])
    greenlet = gevent.spawn(shape_loop, runner)
    greenlet.join(timeout=10)
    gaps = [b - a for a, b in itertools.pairwise(runner.tick_times)]
    assert len(gaps) == 5 and min(gaps) >= TICK_S * 0.9  # never sooner than a tick (gevent's timer)
    assert TICK_S < 0.5  # five times a second: a stage's ramp and the run's end wait a fifth of a second


@pytest.mark.parametrize("name", ["start_shape", "stop"])
def test_locusts_runner_still_runs_the_shape_through_the_attributes_we_set(name):
    source = inspect.getsource(getattr(Runner, name))
    assert {"start_shape": "spawn(self.shape_worker)", "stop": "self.shape_greenlet"}[name] in source
    loop = inspect.getsource(Runner.shape_worker)
    assert "self.shape_last_tick" in loop and "gevent.sleep(max(1 -" in loop  # the loop shape_loop replaces
