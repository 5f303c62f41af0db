"""Client health bookkeeping (loadgen/run/health.py): fake clocks for the arithmetic, one real gevent
check that a greenlet hogging the loop shows up as lag."""

from __future__ import annotations

import time

import gevent
import pytest

from loadgen.run.health import HealthMonitor, StageHealth, is_client_bound, stage_client_bound, worst_of


class Clock:
    def __init__(self) -> None:
        self.wall = 100.0
        self.cpu = 10.0


def monitor(key_box: list, clock: Clock, interval_s: float = 0.05, now_window_s: float = 1.0):
    return HealthMonitor(lambda: key_box[0], interval_s, now_window_s,
                         clock=lambda: clock.wall, cpu_clock=lambda: clock.cpu)


def step(m: HealthMonitor, clock: Clock, lag_s: float, cpu_share: float) -> None:
    """One sampling period: the sleep overran by lag_s; the process used cpu_share of the wall."""
    asked = clock.wall
    clock.wall += m.interval_s + lag_s
    clock.cpu += (m.interval_s + lag_s) * cpu_share
    m.observe(asked, clock.wall, clock.cpu)


def test_lag_and_cpu_are_attributed_to_the_stage_current_at_each_sample():
    key, clock = [None], Clock()
    m = monitor(key, clock)
    m._last = (clock.wall, clock.cpu)  # what start() records
    for _ in range(10):
        step(m, clock, 0.0, 0.2)
    key[0] = 3
    for _ in range(20):
        step(m, clock, 0.010, 0.95)
    delta = m.take_delta()
    idle, measured = StageHealth.from_message(delta[None]), StageHealth.from_message(delta[3])
    assert idle.wall_s == pytest.approx(0.5) and idle.cpu_percent == pytest.approx(20.0)
    assert measured.wall_s == pytest.approx(20 * 0.06)
    assert measured.cpu_percent == pytest.approx(95.0)
    assert measured.lag.count == 20
    assert measured.summary()["loop_lag_p99_s"] == pytest.approx(0.010, rel=0.03)
    assert idle.summary()["loop_lag_p50_s"] <= 1e-6  # zero lag lands in the lowest bucket
    assert m.take_delta() == {}  # a delta is handed over once


def test_a_sample_without_a_cpu_baseline_counts_its_lag_only():
    key, clock = [0], Clock()
    m = monitor(key, clock)  # start() not called: no (wall, cpu) from before the first sleep
    step(m, clock, 0.004, 0.5)
    step(m, clock, 0.0, 0.5)
    h = StageHealth.from_message(m.take_delta()[0])
    assert h.lag.count == 2 and h.lag.max == pytest.approx(0.004)
    assert h.wall_s == pytest.approx(0.05) and h.cpu_percent == pytest.approx(50.0)


def test_merging_deltas_of_one_process_equals_one_delta():
    key, clock = [1], Clock()
    m = monitor(key, clock)
    m._last = (clock.wall, clock.cpu)
    whole = StageHealth()
    for i in range(30):
        step(m, clock, 0.001 * i, 0.5)
        if i % 7 == 0:  # shipped at irregular points, like worker reports
            whole.merge(StageHealth.from_message(m.take_delta()[1]))
    whole.merge(StageHealth.from_message(m.take_delta()[1]))
    assert whole.lag.count == 30
    assert whole.lag.max == pytest.approx(0.029)
    assert whole.wall_s == pytest.approx(30 * 0.05 + 0.001 * sum(range(30)))
    assert whole.cpu_percent == pytest.approx(50.0)


def test_now_values_cover_the_recent_window_only():
    key, clock = [0], Clock()
    m = monitor(key, clock, now_window_s=1.0)
    m._last = (clock.wall, clock.cpu)
    step(m, clock, 0.300, 1.0)  # one big stall
    assert m.loop_lag_now_s == pytest.approx(0.300)
    assert m.cpu_percent_now == pytest.approx(100.0)
    for _ in range(40):  # 2 s of calm, half a core
        step(m, clock, 0.0, 0.5)
    assert m.loop_lag_now_s == 0.0  # the stall left the 1 s window
    assert m.cpu_percent_now == pytest.approx(50.0)


@pytest.mark.parametrize(("summary", "bound"), [
    ({"cpu_percent": 89.9, "loop_lag_p99_s": 0.049}, False),
    ({"cpu_percent": 90.0, "loop_lag_p99_s": 0.001}, True),
    ({"cpu_percent": 10.0, "loop_lag_p99_s": 0.050}, True),
    ({"cpu_percent": 10.0, "loop_lag_p99_s": None}, False),
    ({"cpu_percent": None, "loop_lag_p99_s": 0.2}, True),
])
def test_client_bound_thresholds_are_inclusive(summary, bound):
    assert is_client_bound(summary, 90, 0.05) is bound


def test_worst_of_takes_each_field_from_its_worst_process():
    busy = {"cpu_percent": 85.0, "loop_lag_p50_s": 0.001, "loop_lag_p99_s": 0.004}
    stalled = {"cpu_percent": 40.0, "loop_lag_p50_s": 0.002, "loop_lag_p99_s": 0.120}
    idle = {"cpu_percent": 1.0, "loop_lag_p50_s": None, "loop_lag_p99_s": None}
    w = worst_of([busy, stalled, idle])
    assert w == {"cpu_percent": 85.0, "loop_lag_p50_s": 0.002, "loop_lag_p99_s": 0.120, "processes": 3}
    assert is_client_bound(w, 90, 0.05)  # the stalled process decides, though it is not the busiest
    assert not is_client_bound(busy, 90, 0.05)
    assert worst_of([]) == {"cpu_percent": None, "loop_lag_p50_s": None, "loop_lag_p99_s": None,
                            "processes": 0}


def test_interval_must_be_positive():
    with pytest.raises(ValueError, match="interval_s must be > 0, got 0"):
        HealthMonitor(lambda: None, 0)


def test_sampling_loop_with_a_fake_sleep():
    key, clock = [2], Clock()
    lags = [0.0, 0.002, 0.080]

    def fake_sleep(s):
        if not lags:
            raise gevent.GreenletExit
        lag = lags.pop(0)
        clock.wall += s + lag
        clock.cpu += (s + lag) * 0.25

    m = HealthMonitor(lambda: key[0], 0.05, clock=lambda: clock.wall, cpu_clock=lambda: clock.cpu,
                      sleep=fake_sleep)
    m._last = (clock.wall, clock.cpu)
    with pytest.raises(gevent.GreenletExit):
        m._run()
    h = StageHealth.from_message(m.take_delta()[2])
    assert h.lag.count == 3 and h.lag.max == pytest.approx(0.080)
    assert h.cpu_percent == pytest.approx(25.0)
    assert m.loop_lag_now_s == pytest.approx(0.080)


def test_a_greenlet_hogging_the_loop_shows_up_as_lag():
    """Real clocks: 120 ms of CPU without yielding delays the 50 ms timer by >= 70 ms."""
    m = HealthMonitor(lambda: 0, 0.05)
    m.start()
    try:
        gevent.sleep(0.12)  # a few calm samples first

        def hog():  # 120 ms of CPU (not wall: on a busy machine the wall time is longer)
            end = time.process_time() + 0.12
            while time.process_time() < end:
                pass

        gevent.spawn(hog).join()
        gevent.sleep(0.12)
    finally:
        m.stop()
    h = StageHealth.from_message(m.take_delta()[0])
    assert h.lag.max >= 0.06
    assert h.cpu_s >= 0.12  # the hog's CPU is the process's CPU


def test_connect_backoff_is_shared_doubles_and_resets():
    from loadgen.run.runtime import Backoff

    b = Backoff(0.05, 1.0)
    pauses = [b.failed() for _ in range(7)]  # seven users of one process meet a down server
    assert pauses == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    b.reset()
    assert b.failed() == 0.05


@pytest.mark.parametrize("client, late, bound", [
    ({"cpu_percent": 50, "loop_lag_p99_s": 0.001}, None, False),
    ({"cpu_percent": 95, "loop_lag_p99_s": 0.001}, None, True),
    ({"cpu_percent": None, "loop_lag_p99_s": 9.0}, None, False),  # no CPU figure: not judged
    ({"cpu_percent": 50, "loop_lag_p99_s": 0.001}, 0.004, False),
    ({"cpu_percent": 50, "loop_lag_p99_s": 0.001}, 0.005, True),  # open loop: the schedule slipped
    ({"cpu_percent": None, "loop_lag_p99_s": None}, 0.010, True),
])
def test_a_stage_is_client_bound_by_health_or_by_send_lateness(client, late, bound):
    from types import SimpleNamespace

    check = SimpleNamespace(cpu_percent_max=90, loop_lag_p99_s_max=0.02, lateness_p99_s_max=0.005)
    assert stage_client_bound(client, late, check) is bound


def test_a_stages_warmup_moves_the_heap_out_of_the_collectors_way():
    import gc
    from pathlib import Path

    from locust.env import Environment

    from loadgen.config import load_scenario
    from loadgen.phases import Phase
    from loadgen.run.runtime import Runtime

    root = Path(__file__).resolve().parents[3]
    rt = Runtime(Environment(), load_scenario(root / "config" / "smoke.yaml", {}))
    gc.unfreeze()
    try:
        rt.set_phase(0, Phase.RAMP)
        assert gc.get_freeze_count() == 0, "a ramp (users still spawning) leaves the heap alone"
        kept = [object() for _ in range(1000)]  # long-lived: e.g. the users just spawned
        rt.set_phase(0, Phase.WARMUP)
        assert gc.get_freeze_count() >= len(kept), "every survivor is in the permanent generation"
        assert gc.get_count()[0] < 100, "the young generation starts empty"
    finally:
        gc.unfreeze()


def test_the_next_warmup_frees_what_died_while_frozen():
    import gc
    import weakref

    from loadgen.run.health import settle_heap

    class Node:
        pass

    gc.unfreeze()
    try:
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: only the collector frees it
        alive = weakref.ref(a)
        settle_heap()  # frozen while alive (a user of this stage)
        del a, b  # its stage's user stopped
        gc.collect()
        assert alive() is not None, "a frozen cycle is skipped by ordinary collections"
        settle_heap()  # the next stage's warmup
        assert alive() is None, "the next warmup frees it"
    finally:
        gc.unfreeze()
