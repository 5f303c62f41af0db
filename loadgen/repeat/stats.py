"""Statistics over repeated runs: intervals on a figure, and on a discrete finding; two sets compared.

Pure: no I/O, no clock, no random numbers. Inputs are one value per repetition (None: the
repetition had no such figure; it is left out and counted).

- ``mean_interval``: a stage metric over N repetitions, mean +- t(0.975, N-1) x s / sqrt(N)
  (Student t, s the sample standard deviation). It assumes the repetitions are independent and
  their figure roughly normal (a window's rate or mean: a sum over many requests). N = 1 has no
  interval.
- ``finding_interval``: a discrete finding (the knee's C, the SLO maximum, the KV-bounded maximum)
  over N repetitions: the median and a distribution-free interval for the median, the order
  statistics (x_(j), x_(N+1-j)) with the largest j whose confidence
  1 - 2 P(Binomial(N, 1/2) <= j - 1) is at least 95 %. Below N = 6 no j reaches 95 %: the interval
  is then the range of the findings and its confidence, 1 - 2^(1-N), is stated (75 % at N = 3,
  88 % at 4, 94 % at 5). A t interval would claim 95 % for a mean of findings that only take the
  values of the stages (and are often all equal); a bootstrap over 3..10 values cannot reach
  beyond their range either, and understates its coverage.
- ``welch``: two sets of a metric (baseline, candidate): Welch's t-test (unequal variances,
  Welch-Satterthwaite degrees of freedom), two-sided p-value, and the 95 % interval of the
  difference of means.
- ``permutation_p``: two sets of a discrete finding: the exact two-sided permutation test of the
  difference of means over every split of the pooled values (ties handled; N, M <= 10 each keeps
  it under 185,000 splits). With 3 and 3 no split is rarer than 1 in 10: at 95 % such findings
  are never distinguishable, which is the honest reading of so few.

The t distribution is computed here (regularized incomplete beta by its continued fraction), as
numpy has none and scipy is not a dependency.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

CONFIDENCE = 0.95


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b), 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` > 0 degrees of freedom (not necessarily whole)."""
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p, by bisection on ``t_cdf`` (to 1e-10)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"t_quantile: p must be in (0, 1), got {p!r}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    while hi - lo > 1e-10 * max(1.0, hi):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2.0


def present(values) -> list[float]:
    """The values that are there (None left out), as floats."""
    return [float(v) for v in values if v is not None]


@dataclass(frozen=True)
class Interval:
    """A figure over repetitions: ``mid`` (mean, or for findings the median), ``low``..``high`` (None
    without an interval), ``confidence`` (0-1: what the interval claims), ``n`` values used of ``of``."""

    mid: float | None
    low: float | None
    high: float | None
    confidence: float | None
    n: int
    of: int
    method: str

    def to_dict(self) -> dict:
        return {"mid": self.mid, "low": self.low, "high": self.high, "confidence": self.confidence,
                "n": self.n, "of": self.of, "method": self.method}


def mean_interval(values, confidence: float = CONFIDENCE) -> Interval:
    """Mean and Student t interval over the repetitions (module docstring)."""
    xs, of = present(values), len(values)
    if not xs:
        return Interval(None, None, None, None, 0, of, "t")
    mean = math.fsum(xs) / len(xs)
    if len(xs) < 2:
        return Interval(mean, None, None, None, 1, of, "t")
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
    half = t_quantile(0.5 + confidence / 2.0, len(xs) - 1) * sd / math.sqrt(len(xs))
    return Interval(mean, mean - half, mean + half, confidence, len(xs), of, "t")


def _binom_cdf_half(k: int, n: int) -> float:
    """P(Binomial(n, 1/2) <= k)."""
    return math.fsum(math.comb(n, i) for i in range(k + 1)) / 2.0**n


def order_interval(n: int, confidence: float = CONFIDENCE) -> tuple[int, float]:
    """(j, its confidence): the interval (x_(j), x_(n+1-j)) for the median, 1-based, with the
    largest j whose confidence 1 - 2 P(Bin(n, 1/2) <= j-1) >= ``confidence``; j = 1 (the range)
    when none reaches it."""
    best = 1
    for j in range(1, n // 2 + 1):
        if 1.0 - 2.0 * _binom_cdf_half(j - 1, n) >= confidence:
            best = j
    return best, 1.0 - 2.0 * _binom_cdf_half(best - 1, n)


def finding_interval(values, confidence: float = CONFIDENCE) -> Interval:
    """Median and order-statistic interval of a discrete finding (module docstring)."""
    xs, of = sorted(present(values)), len(values)
    if not xs:
        return Interval(None, None, None, None, 0, of, "order")
    n = len(xs)
    median = xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2.0
    if n < 2:
        return Interval(median, None, None, None, 1, of, "order")
    j, level = order_interval(n, confidence)
    return Interval(median, xs[j - 1], xs[n - j], level, n, of, "order")


@dataclass(frozen=True)
class Welch:
    """Welch's t-test of candidate vs baseline: ``diff`` = mean(candidate) - mean(baseline),
    its 95 % interval ``low``..``high``, ``t``, degrees of freedom ``df``, two-sided ``p``."""

    base_mean: float
    cand_mean: float
    diff: float
    low: float
    high: float
    t: float
    df: float
    p: float


def welch(base, cand, confidence: float = CONFIDENCE) -> Welch | None:
    """Welch's test (module docstring); None with fewer than two values on either side.

        se = sqrt(s_b^2 / n_b + s_c^2 / n_c),  t = diff / se,
        df = se^4 / ((s_b^2/n_b)^2 / (n_b-1) + (s_c^2/n_c)^2 / (n_c-1))

    Both sets without spread: equal means give p = 1, different ones p = 0 (no noise was seen)."""
    b, c = present(base), present(cand)
    if len(b) < 2 or len(c) < 2:
        return None
    mb, mc = math.fsum(b) / len(b), math.fsum(c) / len(c)
    vb = math.fsum((x - mb) ** 2 for x in b) / (len(b) - 1) / len(b)
    vc = math.fsum((x - mc) ** 2 for x in c) / (len(c) - 1) / len(c)
    diff, se = mc - mb, math.sqrt(vb + vc)
    if se == 0.0:
        return Welch(mb, mc, diff, diff, diff, math.copysign(math.inf, diff) if diff else 0.0, math.inf,
                     1.0 if diff == 0 else 0.0)
    df = (vb + vc) ** 2 / (vb**2 / (len(b) - 1) + vc**2 / (len(c) - 1))
    t = diff / se
    half = t_quantile(0.5 + confidence / 2.0, df) * se
    return Welch(mb, mc, diff, diff - half, diff + half, t, df, 2.0 * t_cdf(-abs(t), df))


def permutation_p(base, cand) -> float | None:
    """Exact two-sided permutation p-value of the difference of means (module docstring); None
    with an empty side. p = share of the splits of the pooled values whose |difference| is at
    least the observed one (a tolerance of 1e-9 keeps equal splits equal)."""
    b, c = present(base), present(cand)
    if not b or not c:
        return None
    pooled, nc = b + c, len(c)
    total = math.fsum(pooled)
    observed = abs(math.fsum(c) / nc - math.fsum(b) / len(b))
    hits = count = 0
    for idx in itertools.combinations(range(len(pooled)), nc):
        sc = math.fsum(pooled[i] for i in idx)
        d = abs(sc / nc - (total - sc) / len(b))
        hits += d >= observed - 1e-9 * max(1.0, observed)
        count += 1
    return hits / count
