"""Arrival schedules: rate, spread, seeding, exact split across processes, Little's law helpers."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.workload.arrivals import ArrivalSpec, littles_law_concurrency, max_fitting_rate, rates_geometric


def gaps(times):
    return np.diff(np.concatenate([[0.0], times]))


@pytest.mark.parametrize("kind,burst,cv", [("poisson", 1.0, 1.0), ("constant", 1.0, 0.0),
                                           ("gamma", 0.25, 2.0), ("gamma", 4.0, 0.5)])
def test_rate_and_spread(kind, burst, cv):
    times = np.array(ArrivalSpec(50.0, kind, burst, seed=3).for_part(0, 1).until(400.0))
    n = len(times)
    # count of a Poisson process over 400 s at 50/s: sd sqrt(20000) ~ 141 (0.7%); 4 sd allowed
    assert n == pytest.approx(20_000, rel=0.04 * max(cv, 0.05))
    g = gaps(times)
    assert g.mean() == pytest.approx(1 / 50, rel=0.03)
    assert g.std() / g.mean() == pytest.approx(cv, abs=0.05 * max(cv, 1))
    assert np.all(np.diff(times) >= 0)


def test_same_seed_same_schedule_other_seed_other():
    a = ArrivalSpec(10, "poisson", seed=1).for_part(0, 2).until(50)
    b = ArrivalSpec(10, "poisson", seed=1).for_part(0, 2).until(50)
    c = ArrivalSpec(10, "poisson", seed=2).for_part(0, 2).until(50)
    d = ArrivalSpec(10, "poisson", seed=1).for_part(1, 2).until(50)
    assert a == b and a != c and a != d


def test_constant_split_merges_into_one_even_stream():
    spec = ArrivalSpec(8.0, "constant")
    merged = sorted(t for i in range(3) for t in spec.for_part(i, 3).until(30.0))
    assert np.allclose(np.diff(merged), 1 / 8)
    assert len(merged) == pytest.approx(30 * 8, abs=3)


def test_poisson_split_sums_to_the_rate_and_stays_poisson():
    spec = ArrivalSpec(40.0, "poisson", seed=9)
    parts = [spec.for_part(i, 4) for i in range(4)]
    assert sum(p.rate_per_s for p in parts) == pytest.approx(40.0, abs=1e-12)
    merged = np.sort(np.concatenate([p.until(500.0) for p in parts]))
    g = np.diff(merged)
    assert len(merged) / 500 == pytest.approx(40, rel=0.03)
    assert g.std() / g.mean() == pytest.approx(1.0, abs=0.05)  # exponential gaps: CV 1


def test_bad_specs_name_the_value():
    with pytest.raises(ValueError, match="rate"):
        ArrivalSpec(0)
    with pytest.raises(ValueError, match="burstiness"):
        ArrivalSpec(1, "gamma", burstiness=0)
    with pytest.raises(ValueError, match="arrival"):
        ArrivalSpec(1, "uniform")
    with pytest.raises(ValueError, match="part"):
        ArrivalSpec(1).for_part(2, 2)


def test_geometric_rates_and_littles_law():
    assert rates_geometric(1, 2, 8) == [1, 2, 4, 8]
    assert rates_geometric(0.5, 2, 3) == [0.5, 1, 2]
    assert littles_law_concurrency(20, 2.5) == 50
    rate = max_fitting_rate(1_570_000, 2000, 100.0, 0.0)
    assert littles_law_concurrency(rate, 100.0) * 2000 == pytest.approx(1_570_000)
