"""Early stop of an SLO stage: close the window once its pass/fail verdict is decided.

Pure: no I/O, no clock. Each objective of a stage is a binomial question, "is the share of the
stage's requests that hold it >= its target share t?":

- attainment: a request holds it when it meets every objective (``loadgen.slo.objectives``), t =
  ``slo.attainment``; counted over judged requests (ok + failed).
- a percentile limit ``<metric>_p<P>_s: L`` (``loadgen.slo.limits``): the stage's p<P> <= L
  exactly when the share of samples within L is >= t = P / 100, a sample being within L when the
  histogram bucket it falls in reports a value <= L (``LogHistogram.count_reported_le``), so the
  count agrees with the final verdict on the same histogram. TTFT, TPOT and E2E only: one sample
  per ok request. A per-token ITL limit is never decided early (its samples are tokens, many per
  request and correlated within it, and a running request's token count is unknown), so a stage
  with one only stops early on a *fail* decided by another objective.

The rule (``EarlyStop.decide``), with alpha = 1 - ``slo.confidence``:

- looks: at n_j = 16 x 2^j requests (j = 0 .. 11, 16 to 32768), the budget split equally,
  alpha_j = alpha / 12 (Bonferroni over the looks). n counts the question's requests *sent* in
  the window so far: finished (``seen``) + still running.
- finished-first bias: the requests still running are the slow ones, so they count as misses
  when deciding "pass" and as hits when deciding "fail". Among the first n_j requests sent,
  hits >= S_low = hits - (n - n_j) and hits <= S_up = min(n_j, hits + running), whatever the
  running ones turn out to be.
- pass: every question has a look j with S_low >= s_pass(n_j, t, alpha_j), the least s with
  P(Bin(n_j, t) >= s) <= alpha_j; equivalently its one-sided Clopper-Pearson lower bound
  L(S_low, n_j, alpha_j) >= t.
- fail: some question has a look j with S_up <= s_fail(n_j, t, alpha_j / m), the largest s with
  P(Bin(n_j, t) <= s) <= alpha_j / m (m: the questions decided early); equivalently its
  Clopper-Pearson upper bound U(S_up, n_j, alpha_j / m) <= t.

Error rate: model the stage's requests, in the order they are sent, as independent draws that
hold each objective with a fixed probability p (the stage's true share). A wrong pass needs a
question with p < t to pass one of its looks; for each look j the event is contained in "the first
n_j requests hold it at least s_pass times" (S_low never exceeds that count), of probability
<= alpha_j under p < t; summed over the 12 looks, <= alpha. A wrong fail needs every p >= t and
one of m questions failing one of its looks: <= 12 x m x alpha / (12 m) = alpha. So P(wrong early
verdict) <= 1 - confidence, whatever the looks' timing (each look's event is fixed in advance, so
looking at every tick does not inflate it). Because S_low and S_up bound the whole window's
count too, an early pass also means the window's final attainment >= t (and a fail < t): on the
counts the rule saw, the row's final verdict cannot disagree. It can only when the rule saw stale
counts (distributed: workers report every 3 s) or a histogram's clamp to its max moved; the row
says so (``early_stop.agrees``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from loadgen.slo.limits import HISTOGRAM_OF, parse_limit_key
from loadgen.slo.objectives import Objectives

FIRST_LOOK = 16  # requests at the first look
LOOKS = 12  # looks at FIRST_LOOK x 2^j, j < LOOKS
EARLY_METRICS = ("ttft", "tpot", "e2e")  # one sample per ok request: decidable early


# --- exact binomial tails and Clopper-Pearson bounds ---------------------------------------------

def _log_pmf(n: int, p: float) -> np.ndarray:
    """log P(X = i), i = 0..n, X ~ Bin(n, p); -inf where the probability is 0."""
    i = np.arange(n + 1)
    if p <= 0.0 or p >= 1.0:
        return np.where(i == (0 if p <= 0.0 else n), 0.0, -np.inf)
    # log C(n, i) as a cumulative sum of log((n - i + 1) / i)
    log_comb = np.concatenate(([0.0], np.cumsum(np.log(np.arange(n, 0, -1)) - np.log(np.arange(1, n + 1)))))
    return log_comb + i * math.log(p) + (n - i) * math.log1p(-p)


def _log_sum(logs: np.ndarray) -> float:
    top = float(np.max(logs)) if len(logs) else -np.inf
    return top if top == -np.inf else top + math.log(float(np.sum(np.exp(logs - top))))


def tail_ge(k: int, n: int, p: float) -> float:
    """P(X >= k), X ~ Bin(n, p)."""
    if k <= 0:
        return 1.0
    return 0.0 if k > n else min(1.0, math.exp(_log_sum(_log_pmf(n, p)[k:])))


def tail_le(k: int, n: int, p: float) -> float:
    """P(X <= k), X ~ Bin(n, p)."""
    if k >= n:
        return 1.0
    return 0.0 if k < 0 else min(1.0, math.exp(_log_sum(_log_pmf(n, p)[: k + 1])))


def _solve(f, target: float) -> float:
    """The p in [0, 1] where the increasing function f(p) crosses ``target`` (bisection, 1e-12)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if f(mid) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def cp_lower(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper-Pearson lower bound for p from k hits in n: the p with P(X >= k | p) =
    alpha (0 when k = 0). P(bound > true p) <= alpha."""
    return 0.0 if k <= 0 else _solve(lambda p: tail_ge(k, n, p), alpha)


def cp_upper(k: int, n: int, alpha: float) -> float:
    """One-sided Clopper-Pearson upper bound for p from k hits in n: the p with P(X <= k | p) =
    alpha (1 when k = n). P(bound < true p) <= alpha."""
    return 1.0 if k >= n else 1.0 - _solve(lambda q: tail_le(k, n, 1.0 - q), alpha)


@lru_cache(maxsize=4096)
def pass_count(n: int, share: float, alpha: float) -> int:
    """The least s with P(Bin(n, share) >= s) <= alpha (n + 1: no count passes)."""
    pmf = np.exp(_log_pmf(n, share))
    tail = np.cumsum(pmf[::-1])[::-1]  # tail[s] = P(X >= s)
    ok = np.flatnonzero(tail <= alpha)
    return int(ok[0]) if len(ok) else n + 1


@lru_cache(maxsize=4096)
def fail_count(n: int, share: float, alpha: float) -> int:
    """The largest s with P(Bin(n, share) <= s) <= alpha (-1: no count fails)."""
    cdf = np.cumsum(np.exp(_log_pmf(n, share)))
    ok = np.flatnonzero(cdf <= alpha)
    return int(ok[-1]) if len(ok) else -1


def looks_up_to(n: int) -> list[int]:
    """The look sizes n_j = FIRST_LOOK x 2^j (j < LOOKS) that are <= n, largest first."""
    return [FIRST_LOOK << j for j in reversed(range(LOOKS)) if FIRST_LOOK << j <= n]


# --- the stage's live counts and the rule ---------------------------------------------------------

@dataclass(frozen=True)
class LiveCounts:
    """A measuring stage's counts so far, merged over every process (integers: exact merge).

    ``judged``: its requests finished (ok + failed); ``met``: those meeting every objective;
    ``running``: its requests still running; ``within``: per percentile limit key, (samples
    within the limit, samples)."""

    judged: int
    met: int
    running: int
    within: tuple[tuple[str, int, int], ...] = ()


def live_counts(stats, running: int, objectives: Objectives) -> LiveCounts:
    """The counts of a StageStats (None: nothing finished yet) and its ``running`` requests."""
    if stats is None:
        return LiveCounts(0, 0, running)
    within = []
    for key, limit in objectives.limits:
        metric = parse_limit_key(key).metric
        if metric in EARLY_METRICS:
            hist = getattr(stats, HISTOGRAM_OF[metric])
            within.append((key, hist.count_reported_le(limit), hist.count))
    return LiveCounts(stats.slo.judged, stats.slo.met, running, tuple(within))


@dataclass(frozen=True)
class Bound:
    """One question's deciding look: the Clopper-Pearson bound on its share (lower for a pass,
    upper for a fail) against the target share, at a look of ``look`` requests."""

    key: str  # "attainment" or a percentile limit key
    share: float  # the target share t
    bound: float
    look: int


@dataclass(frozen=True)
class EarlyVerdict:
    """The verdict decided before the window's end (``EarlyStop.decide``)."""

    verdict: str  # "pass" | "fail"
    confidence: float
    bounds: tuple[Bound, ...]  # a pass: every question's lower bound; a fail: the failing one's upper
    requests: int  # the stage's requests sent in the window when it was decided (judged + running)

    def text(self) -> str:
        """``pass (attainment >= 93.1% (target 90%); 95% confidence, 140 requests)`` for the console:
        each question's bound on its share (lower for a pass, upper for a fail) and its target."""
        sign = ">=" if self.verdict == "pass" else "<="
        parts = ", ".join(f"{b.key} {sign} {b.bound:.1%} (target {b.share * 100:g}%)" for b in self.bounds)
        return f"{self.verdict} ({parts}; {self.confidence:.0%} confidence, {self.requests} requests)"

    def to_row(self, final_pass: bool) -> dict:
        """The row's ``slo.early_stop``: the verdict, per question its bound, target share and
        look (requests), and whether the row's final verdict on all its requests agrees."""
        return {"verdict": self.verdict, "confidence": self.confidence, "requests": self.requests,
                "bounds": {b.key: round(b.bound, 6) for b in self.bounds},
                "targets": {b.key: b.share for b in self.bounds},
                "look_requests": {b.key: b.look for b in self.bounds},
                "agrees": final_pass == (self.verdict == "pass")}


class EarlyStop:
    """The rule of the module docstring for one scenario's objectives."""

    def __init__(self, objectives: Objectives):
        self.confidence = objectives.confidence
        self.alpha_look = (1.0 - objectives.confidence) / LOOKS
        self.attainment = objectives.attainment
        self.shares = {key: parse_limit_key(key).q for key, _ in objectives.limits}
        # a per-token ITL limit: never decided early, so no early pass
        self.can_pass = all(parse_limit_key(k).metric in EARLY_METRICS for k in self.shares)

    def _questions(self, live: LiveCounts) -> list[tuple[str, float, int, int]]:
        """(key, target share, hits, finished) of every question decided early."""
        return [("attainment", self.attainment, live.met, live.judged),
                *((key, self.shares[key], hits, seen) for key, hits, seen in live.within)]

    def decide(self, live: LiveCounts) -> EarlyVerdict | None:
        """pass, fail, or None (undecided) from the stage's counts so far."""
        questions = self._questions(live)
        alpha_fail = self.alpha_look / len(questions)
        sent = live.judged + live.running
        for key, share, hits, seen in questions:
            n = seen + live.running
            for look in looks_up_to(n):
                s_up = min(look, hits + live.running)
                if s_up <= fail_count(look, share, alpha_fail):
                    bound = Bound(key, share, cp_upper(s_up, look, alpha_fail), look)
                    return EarlyVerdict("fail", self.confidence, (bound,), sent)
        if not self.can_pass:
            return None
        bounds = []
        for key, share, hits, seen in questions:
            n = seen + live.running
            passed = next((look for look in looks_up_to(n)
                           if hits - (n - look) >= pass_count(look, share, self.alpha_look)), None)
            if passed is None:
                return None
            bounds.append(Bound(key, share, cp_lower(hits - (n - passed), passed, self.alpha_look), passed))
        return EarlyVerdict("pass", self.confidence, tuple(bounds), sent)
