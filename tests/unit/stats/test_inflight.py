"""The in-flight integral with a fake clock: exact areas, peaks, only while a window is open."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.stats.inflight import InflightMeter
from loadgen.stats.stage_stats import Collector


def test_area_and_peak_of_a_known_trace():
    c = Collector()
    m = InflightMeter(c)
    m.change(+1, 0.0)  # before the window: not counted
    m.measure(3, 1.0)  # window opens with 1 in flight
    m.change(+1, 2.0)  # 1 x 1 s
    m.change(+1, 2.5)  # 2 x 0.5 s
    m.change(-1, 4.0)  # 3 x 1.5 s
    m.measure(None, 5.0)  # 2 x 1 s; window closed
    m.change(-1, 9.0)
    s = c.stages[3]
    assert s.inflight_us == 1_000_000 + 1_000_000 + 4_500_000 + 2_000_000
    assert s.inflight_peak == 3
    assert s.row(4.0) is not None and s.inflight_us / 1e6 / 4.0 == pytest.approx(2.125)


def test_processes_merge_to_the_sum_of_their_integrals():
    rng = np.random.default_rng(5)
    master, total_us = Collector(), 0
    for _ in range(3):
        c = Collector()
        m = InflightMeter(c)
        m.measure(0, 0.0)
        t, n, area = 0.0, 0, 0.0
        for _ in range(500):
            dt = float(rng.exponential(0.01))
            area += n * dt
            t += dt
            d = 1 if n == 0 or rng.random() < 0.5 else -1
            m.change(d, t)
            n += d
        m.measure(None, t)
        total_us += c.stages[0].inflight_us
        assert c.stages[0].inflight_us == pytest.approx(area * 1e6, abs=1)
        master.merge_delta(c.take_delta())
    assert master.stages[0].inflight_us == total_us
