"""Drift over a soak: a trend test on each sliced stage's series. Pure: no I/O, no clock, numpy only.

For each watched series of a stage's time slices (``loadgen.stats.slices``), with t_i the middle
of slice i in hours:

- **Mann-Kendall**: S = sum over i<j of sign(y_j - y_i); Var(S) = [n(n-1)(2n+5) - sum over tie
  groups of t(t-1)(2t+5)] / 18; z = (S - sign(S)) / sqrt(Var S); two-sided p = erfc(|z| / sqrt 2).
- **Sen's slope** (per hour): the median of the pairwise slopes (y_j - y_i) / (t_j - t_i); its
  1 - alpha interval: the pairwise slopes of rank (N - C) / 2 and (N + C) / 2 (0-based, sorted),
  N = number of pairs, C = z_(1 - alpha/2) x sqrt(Var S).

Both are rank-based: a p99 slice with one slow outlier moves them little, and neither assumes a
normal noise. They do assume independent slices; real slices are correlated a little (a queue
lasts longer than a slice), which is one reason a trend must also be large to count:

A stage **drifts** in a series when p < ``alpha`` and |slope| >= that series' threshold per hour
(``DriftConfig``): relative series (throughput, TTFT p99, ITL p99) in percent of the series'
median per hour (ITL p50 too: the decode speed, which ITL p99's client and network jitter can
hide), absolute ones (error rate, KV use, preemptions per minute) in their unit per hour.
**Since when**: the start of the slice where a hinge (flat, then a straight line) fits the series
best (least squares over at most 200 candidate hinges). Fewer than ``min_slices`` usable slices
(full, with the figure): no verdict. Above ``MAX_POINTS`` slices, consecutive slices are averaged
into ``MAX_POINTS`` points first (the pairwise slopes grow as n^2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MAX_POINTS = 400


@dataclass(frozen=True)
class DriftConfig:
    """The ``drift:`` section: what counts as drift, per hour (docs/soak.md)."""

    throughput_pct_per_h: float = 10.0  # output tok/s, % of its median per hour
    ttft_p99_pct_per_h: float = 20.0
    itl_p99_pct_per_h: float = 20.0
    itl_p50_pct_per_h: float = 20.0  # the decode speed itself (p99 also holds client and network jitter)
    error_rate_per_h: float = 0.01  # failed / completed, per hour (0.01 = 1 percentage point)
    kv_usage_per_h: float = 0.05  # the server's KV use (0-1) per hour
    preemptions_per_min_per_h: float = 1.0
    alpha: float = 0.01  # the trend test's two-sided level, and 1 - the interval's confidence
    min_slices: int = 10


@dataclass(frozen=True)
class Series:
    key: str  # the name in the verdict
    column: str  # the slice row's field
    threshold: str  # the DriftConfig field
    relative: bool  # threshold in % of the median per hour
    unit: str
    per_minute: bool = False  # a count per slice, as a rate per minute


SERIES: tuple[Series, ...] = (
    Series("throughput", "output_tokens_per_s", "throughput_pct_per_h", True, "tok/s"),
    Series("ttft_p99", "ttft_p99_s", "ttft_p99_pct_per_h", True, "s"),
    Series("itl_p99", "itl_p99_s", "itl_p99_pct_per_h", True, "s"),
    Series("itl_p50", "itl_p50_s", "itl_p50_pct_per_h", True, "s"),
    Series("error_rate", "error_rate", "error_rate_per_h", False, "ratio"),
    Series("kv_usage", "server_kv_usage_mean", "kv_usage_per_h", False, "ratio"),
    Series("preemptions", "server_preemptions", "preemptions_per_min_per_h", False, "/min", per_minute=True),
)


LATENCY = frozenset(("ttft_p99", "itl_p99", "itl_p50"))
# Not a drift of the server's: the load generator's own event-loop lag. When it grows while a latency
# series moved, the verdict says so (the latency may be the client's).
CLIENT_LAG = Series("client_loop_lag", "client_loop_lag_s", "", False, "s")


@dataclass(frozen=True)
class Trend:
    slope: float  # Sen's slope, unit per hour
    low: float  # its 1 - alpha interval
    high: float
    p: float  # Mann-Kendall two-sided p
    n: int


def normal_quantile(q: float) -> float:
    """z with P(Z <= z) = q, by bisection on erfc (no scipy): 60 halvings, exact to float precision."""
    lo, hi = -40.0, 40.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if 0.5 * math.erfc(-mid / math.sqrt(2)) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def mann_kendall(y: np.ndarray) -> tuple[float, float, float]:
    """(S, Var S with the tie correction, two-sided p) of the series ``y`` in time order."""
    n = len(y)
    i, j = np.triu_indices(n, 1)
    s = float(np.sign(y[j] - y[i]).sum())
    _, ties = np.unique(y, return_counts=True)
    var = (n * (n - 1) * (2 * n + 5) - float((ties * (ties - 1) * (2 * ties + 5)).sum())) / 18.0
    if var <= 0:
        return s, 0.0, 1.0
    z = (s - math.copysign(1.0, s)) / math.sqrt(var) if s else 0.0
    return s, var, math.erfc(abs(z) / math.sqrt(2))


def trend(t: np.ndarray, y: np.ndarray, alpha: float = 0.01) -> Trend:
    """Sen's slope of ``y`` over ``t`` (hours) with its interval, and the Mann-Kendall p (module doc)."""
    t, y = np.asarray(t, dtype=float), np.asarray(y, dtype=float)
    n = len(y)
    if n < 3:
        raise ValueError(f"a trend needs at least 3 points, got {n}")
    _, var, p = mann_kendall(y)
    i, j = np.triu_indices(n, 1)
    dt = t[j] - t[i]
    slopes = np.sort((y[j] - y[i])[dt > 0] / dt[dt > 0])
    pairs = len(slopes)
    c = normal_quantile(1 - alpha / 2) * math.sqrt(var)
    lo = int(np.clip(math.floor((pairs - c) / 2), 0, pairs - 1))
    hi = int(np.clip(math.ceil((pairs + c) / 2), 0, pairs - 1))
    return Trend(float(np.median(slopes)), float(slopes[lo]), float(slopes[hi]), p, n)


def hinge_start(t: np.ndarray, y: np.ndarray) -> float:
    """The t where "flat until t0, then a straight line" fits ``y`` best (least squares)."""
    t, y = np.asarray(t, dtype=float), np.asarray(y, dtype=float)
    candidates = np.unique(np.linspace(0, len(t) - 3, min(200, len(t) - 2)).astype(int))
    best, best_t = math.inf, float(t[0])
    for k in candidates:
        x = np.maximum(t - t[k], 0.0)
        a = np.column_stack([np.ones_like(x), x])
        coef, *_ = np.linalg.lstsq(a, y, rcond=None)
        sse = float(((a @ coef - y) ** 2).sum())
        if sse < best * (1 - 1e-12):  # the earliest of equally good hinges
            best, best_t = sse, float(t[k])
    return best_t


def _binned(t: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if len(t) <= MAX_POINTS:
        return t, y
    groups = np.array_split(np.arange(len(t)), MAX_POINTS)
    return np.array([t[g].mean() for g in groups]), np.array([y[g].mean() for g in groups])


def series_points(slices: list[dict], s: Series, slice_s: float) -> tuple[np.ndarray, np.ndarray]:
    """(t hours, value) of the usable slices: at least half a slice long, with the figure."""
    t, y = [], []
    for row in slices:
        value, duration = row.get(s.column), row.get("duration_s") or 0.0
        if value is None or duration < slice_s / 2:
            continue
        t.append((row["start_s"] + duration / 2) / 3600.0)
        y.append(value / duration * 60.0 if s.per_minute else value)
    return np.array(t), np.array(y, dtype=float)


def stage_drift(slices: list[dict], slice_s: float, config: DriftConfig | None = None) -> dict:
    """The stage's drift verdict: ``series`` {key: its trend and threshold}, ``moved`` (the
    series beyond their threshold, each with slope, interval, p and since_s: seconds into the
    window), ``drift`` (bool, None without enough slices) and ``verdict`` (one line)."""
    config = config or DriftConfig()
    out: dict = {"series": {}, "moved": [], "drift": None, "method": "Mann-Kendall + Sen's slope",
                 "alpha": config.alpha}
    for s in SERIES:
        t, y = series_points(slices, s, slice_s)
        if len(t) < max(config.min_slices, 3) or np.ptp(t) <= 0:
            continue
        entry = _series_entry(t, y, s, config)
        if entry is None:
            continue
        out["series"][s.key] = entry
        if entry["moved"]:
            out["moved"].append({"series": s.key, **entry})
    if out["series"]:
        out["drift"] = bool(out["moved"])
    if LATENCY & {m["series"] for m in out["moved"]}:
        out["client_lag"] = _client_lag(slices, slice_s, config)
    out["verdict"] = verdict_line(out)
    return out


def _client_lag(slices: list[dict], slice_s: float, config: DriftConfig) -> dict | None:
    """The client's loop lag trend when it grew significantly (None otherwise, or without enough slices)."""
    t, y = series_points(slices, CLIENT_LAG, slice_s)
    if len(t) < max(config.min_slices, 3) or np.ptp(t) <= 0:
        return None
    tr = trend(*_binned(t, y), config.alpha)
    if tr.p >= config.alpha or tr.slope <= 0:
        return None
    return {"slope_per_h": tr.slope, "low_per_h": tr.low, "high_per_h": tr.high, "p": tr.p}


def _series_entry(t: np.ndarray, y: np.ndarray, s: Series, config: DriftConfig) -> dict | None:
    """One series' trend: over the whole stage; when that is significant, over the part after the
    hinge (``since_s``), so a drift that began late is measured at its own pace, not diluted."""
    bt, by = _binned(t, y)
    tr = trend(bt, by, config.alpha)
    since_h = float(t[0])
    if tr.p < config.alpha:
        since_h = hinge_start(bt, by)
        tail = bt >= since_h
        if since_h > bt[0] and tail.sum() >= max(config.min_slices, 3):
            tr = trend(bt[tail], by[tail], config.alpha)
        else:
            since_h = float(t[0])
    before = y[t < since_h]
    level = float(np.median(before if len(before) >= 3 else y))  # relative to the level before it moved
    if s.relative and not level:
        return None
    scale = 100.0 / abs(level) if s.relative else 1.0  # the threshold's unit per slope unit
    limit = getattr(config, s.threshold)
    entry = {"slope_per_h": tr.slope, "low_per_h": tr.low, "high_per_h": tr.high, "p": tr.p, "n": tr.n,
             "level": level, "unit": s.unit, "threshold_per_h": limit, "relative": s.relative,
             "since_s": round(since_h * 3600.0, 1),
             "moved": tr.p < config.alpha and abs(tr.slope * scale) >= limit}
    if s.relative:
        entry.update(pct_per_h=tr.slope * scale, pct_low_per_h=tr.low * scale, pct_high_per_h=tr.high * scale)
    return entry


def verdict_line(d: dict) -> str:
    """One line: ``steady: no drift in throughput, ...`` or what moved, how fast, since when."""
    if d["drift"] is None:
        return "no drift verdict: too few time slices"
    if not d["drift"]:
        return f"steady: no drift beyond the thresholds in {', '.join(d['series'])}"
    parts = []
    for m in d["moved"]:
        if m["relative"]:
            rate = f"{m['pct_per_h']:+.1f} %/h [{m['pct_low_per_h']:+.1f}, {m['pct_high_per_h']:+.1f}]"
        else:
            rate = f"{m['slope_per_h']:+.3g} {m['unit']}/h [{m['low_per_h']:+.3g}, {m['high_per_h']:+.3g}]"
        parts.append(f"{m['series']} {rate} since {m['since_s'] / 60:.0f} min")
    if lag := d.get("client_lag"):
        parts.append(f"the client's loop lag grew too ({lag['slope_per_h'] * 1000:+.2g} ms/h): the latency drift "
                     "may be the client's (see client_bound)")
    return "drift: " + "; ".join(parts)


def attach(row: dict, drift: dict) -> dict:
    """A stage row (summary.json form) gets its ``drift`` object, and the ``drift`` flag when it moved."""
    row["drift"] = drift
    if drift.get("drift") and "drift" not in row.setdefault("flags", []):
        row["flags"].append("drift")
    return row
