"""Length distributions: means, spreads, clamps, seeding and validation."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.workload.lengths import LengthDist, LengthSampler


def draws(dist, n=40_000, seed=1):
    return dist.draw(np.random.default_rng(seed), n)


def test_fixed_is_exact():
    assert set(draws(LengthDist("fixed", value=1000)).tolist()) == {1000}


def test_uniform_covers_its_range_evenly():
    x = draws(LengthDist("uniform", min=100, max=300))
    assert x.min() == 100 and x.max() == 300
    assert x.mean() == pytest.approx(200, rel=0.01)
    assert x.std() == pytest.approx(200 / np.sqrt(12), rel=0.02)


@pytest.mark.parametrize("kind", ["normal", "lognormal"])
def test_mean_and_spread_as_asked(kind):
    x = draws(LengthDist(kind, mean=800, std=200, min=1, max=100_000))
    assert x.mean() == pytest.approx(800, rel=0.01)
    assert x.std() == pytest.approx(200, rel=0.03)
    assert x.dtype == np.int64 and x.min() >= 1


def test_clamps_hold():
    x = draws(LengthDist("lognormal", mean=500, std=2000, min=10, max=4000))
    assert x.min() >= 10 and x.max() <= 4000 and (x == 4000).any()


def test_sampler_is_seeded_and_independent_per_seed():
    a = LengthSampler(LengthDist("uniform", min=1, max=10**6), LengthDist("fixed", value=5), (1, 0))
    b = LengthSampler(LengthDist("uniform", min=1, max=10**6), LengthDist("fixed", value=5), (1, 0))
    c = LengthSampler(LengthDist("uniform", min=1, max=10**6), LengthDist("fixed", value=5), (1, 1))
    sa = [a.next() for _ in range(1000)]
    assert sa == [b.next() for _ in range(1000)] and sa != [c.next() for _ in range(1000)]
    assert all(o == 5 for _, o in sa)


@pytest.mark.parametrize("dist,field", [
    (LengthDist("fixed"), "value"), (LengthDist("uniform", min=5), "max"),
    (LengthDist("normal", mean=-1, std=1), "mean"), (LengthDist("lognormal", mean=10, std=-1), "std"),
    (LengthDist("uniform", min=10, max=5), "max"), (LengthDist("zipf"), "kind"), (LengthDist("fixed", value=3, min=0), "min"),
])
def test_problems_name_the_field(dist, field):
    assert [p[0] for p in dist.problems()] == [field]


def test_describe_and_upper():
    assert LengthDist("fixed", value=7).describe() == "7" and LengthDist("fixed", value=7).upper == 7
    assert LengthDist("uniform", min=1, max=9).describe() == "uniform 1..9"
    assert "lognormal mean 800" in LengthDist("lognormal", mean=800, std=1, max=None).describe()
