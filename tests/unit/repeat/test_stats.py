"""loadgen.repeat.stats: the t distribution, intervals over repetitions, Welch and the
permutation test, on seeded synthetic data (deterministic: no test depends on luck)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadgen.repeat.stats import (
    betainc,
    finding_interval,
    mean_interval,
    order_interval,
    permutation_p,
    t_cdf,
    t_quantile,
    welch,
)

# t(0.975, df) from the printed tables (Student's t, two-sided 95 %)
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 9: 2.262, 29: 2.045, 120: 1.980}


@pytest.mark.parametrize("df,expected", sorted(T975.items()))
def test_t_quantile_matches_the_printed_table(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=6e-4)
    assert t_quantile(0.025, df) == pytest.approx(-expected, abs=6e-4)


def test_t_cdf_closed_forms_and_fractional_df():
    # df = 1 is Cauchy: F(t) = 1/2 + atan(t)/pi; df = 2: F(t) = 1/2 + t / (2 sqrt(2 + t^2))
    for t in (-3.0, -0.5, 0.0, 0.7, 4.0):
        assert t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)
        assert t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)
    assert t_cdf(1.0, 2.5) > t_cdf(1.0, 2.0)  # heavier tails at fewer degrees of freedom
    assert t_cdf(1.96, 1e6) == pytest.approx(0.975, abs=1e-4)  # the normal limit


def test_betainc_symmetry():
    for a, b, x in ((2.0, 3.0, 0.3), (0.5, 7.5, 0.9), (10.0, 0.5, 0.99)):
        assert betainc(a, b, x) == pytest.approx(1.0 - betainc(b, a, 1.0 - x), abs=1e-12)


def test_mean_interval_by_hand():
    iv = mean_interval([10.0, 12.0, 14.0])  # mean 12, sd 2, half width 4.303 x 2 / sqrt(3)
    half = 4.3027 * 2 / math.sqrt(3)
    assert (iv.mid, iv.n, iv.of) == (12.0, 3, 3)
    assert iv.low == pytest.approx(12 - half, abs=1e-3) and iv.high == pytest.approx(12 + half, abs=1e-3)
    assert iv.confidence == 0.95


def test_mean_interval_missing_values_and_one_value():
    iv = mean_interval([5.0, None, 7.0])
    assert (iv.mid, iv.n, iv.of) == (6.0, 2, 3)
    one = mean_interval([None, 4.0])
    assert (one.mid, one.low, one.high) == (4.0, None, None)
    assert mean_interval([None]).mid is None


def test_mean_interval_covers_the_true_mean_about_95_percent_seeded():
    """2,000 seeded samples of N=5 normal values: the t interval covers the mean 93.5-96.5 % of the
    time (binomial sd ~0.5 %; a z interval would give ~88 %, a wrong t quantile fails too)."""
    rng = np.random.default_rng(20261202)
    hits = sum(_covers(rng) for _ in range(2000))
    assert 0.935 <= hits / 2000 <= 0.965


def _covers(rng) -> bool:
    iv = mean_interval(list(rng.normal(100.0, 7.0, 5)))
    return iv.low <= 100.0 <= iv.high


def test_order_interval_confidences():
    assert order_interval(3) == (1, 0.75)
    assert order_interval(5) == (1, 0.9375)
    j, level = order_interval(6)
    assert j == 1 and level == pytest.approx(1 - 2 / 64)
    j, level = order_interval(10)  # P(Bin(10, .5) <= 1) = 11/1024 -> j = 2 at 97.9 %
    assert j == 2 and level == pytest.approx(1 - 22 / 1024)


def test_answer_interval_discrete():
    iv = finding_interval([48, 64, 56])
    assert (iv.mid, iv.low, iv.high, iv.confidence) == (56, 48, 64, 0.75)
    iv = finding_interval([64, 64, 64, 64])
    assert (iv.mid, iv.low, iv.high) == (64, 64, 64)
    iv = finding_interval([8, None, 16])
    assert (iv.mid, iv.n, iv.of) == (12, 2, 3)
    ten = finding_interval([1, 2, 3, 4, 5, 6, 7, 8, 9, 100])
    assert (ten.low, ten.high) == (2, 9)  # the outlier is outside the 97.9 % order interval
    assert finding_interval([None, None]).mid is None


def test_welch_by_hand_and_known_p():
    # equal n and variance: Welch's t equals Student's; diff 3, se = sqrt(1/3 + 1/3), df = 4
    w = welch([9.0, 10.0, 11.0], [12.0, 13.0, 14.0])
    assert w.diff == 3.0 and w.df == pytest.approx(4.0)
    assert w.t == pytest.approx(3.0 / math.sqrt(2 / 3))
    assert w.p == pytest.approx(2 * (1 - t_cdf(3.0 / math.sqrt(2 / 3), 4)))
    assert w.p < 0.05 and w.low > 0
    same = welch([9.0, 10.0, 11.0], [9.5, 10.5, 10.0])
    assert same.p > 0.05 and same.low < 0 < same.high


def test_welch_unequal_variances_df():
    w = welch([1.0, 2.0, 3.0, 4.0], [10.0, 30.0, 50.0])
    vb, vc = (5 / 3) / 4, 400.0 / 3
    assert w.df == pytest.approx((vb + vc) ** 2 / (vb**2 / 3 + vc**2 / 2))


def test_welch_degenerate():
    assert welch([1.0], [1.0, 2.0]) is None
    assert welch([5.0, 5.0], [5.0, 5.0]).p == 1.0
    assert welch([5.0, 5.0], [6.0, 6.0]).p == 0.0


def test_welch_false_positive_rate_is_five_percent_seeded():
    """Same distribution on both sides (N=4 each): p < 0.05 in 3.5-6.5 % of 2,000 seeded trials."""
    rng = np.random.default_rng(7)
    hits = sum(welch(list(rng.normal(50, 3, 4)), list(rng.normal(50, 3, 4))).p < 0.05 for _ in range(2000))
    assert 0.035 <= hits / 2000 <= 0.065


def test_permutation_p_exact():
    assert permutation_p([1, 2, 3], [4, 5, 6]) == pytest.approx(2 / 20)  # complete separation, 3 vs 3
    assert permutation_p([1, 2, 3, 4], [5, 6, 7, 8]) == pytest.approx(2 / 70)
    assert permutation_p([64, 64, 64], [64, 64, 64]) == 1.0
    assert permutation_p([], [1]) is None
