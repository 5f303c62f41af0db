"""The early-stop rule of an SLO stage (loadgen.slo.early): exact bounds, the decision, and its
wrong-verdict rate in a seeded simulation. Pure: no clock, no I/O."""

from __future__ import annotations

import math
import random
from fractions import Fraction
from functools import lru_cache

import pytest

from loadgen.slo.early import (
    FIRST_LOOK,
    LOOKS,
    EarlyStop,
    EarlyVerdict,
    LiveCounts,
    cp_lower,
    cp_upper,
    fail_count,
    live_counts,
    looks_up_to,
    pass_count,
    tail_ge,
    tail_le,
)
from loadgen.slo.objectives import Objectives
from loadgen.stats.hist import LogHistogram
from loadgen.stats.stage_stats import StageStats


@lru_cache(maxsize=64)
def brute_pmf(n: int, p: float) -> tuple[Fraction, ...]:
    """P(Bin(n, p) = i), i = 0..n, as exact rationals."""
    q = Fraction(p)
    return tuple(math.comb(n, i) * q**i * (1 - q) ** (n - i) for i in range(n + 1))


def brute_ge(k: int, n: int, p: float) -> float:
    """P(Bin(n, p) >= k) as an exact sum of its terms."""
    return float(sum(brute_pmf(n, p)[max(k, 0):]))


def brute_le(k: int, n: int, p: float) -> float:
    return float(sum(brute_pmf(n, p)[: max(k + 1, 0)]))


@pytest.mark.parametrize(("k", "n", "p"), [(0, 5, 0.3), (3, 5, 0.3), (5, 5, 0.3), (60, 64, 0.9),
                                           (64, 64, 0.99), (10, 64, 0.5), (250, 256, 0.99)])
def test_binomial_tails_equal_the_exact_sum_of_terms(k, n, p):
    assert tail_ge(k, n, p) == pytest.approx(brute_ge(k, n, p), rel=1e-9, abs=1e-300)
    assert tail_le(k, n, p) == pytest.approx(brute_le(k, n, p), rel=1e-9, abs=1e-300)


@pytest.mark.parametrize(("k", "n", "alpha"), [(9, 10, 0.05), (60, 64, 0.004), (255, 256, 0.01),
                                               (1, 16, 0.05), (30, 40, 0.1)])
def test_clopper_pearson_bounds_solve_the_tail_equation(k, n, alpha):
    lower, upper = cp_lower(k, n, alpha), cp_upper(k, n, alpha)
    # the defining equations, checked on the independent exact sum
    assert brute_ge(k, n, lower) == pytest.approx(alpha, rel=1e-6)
    assert brute_le(k, n, upper) == pytest.approx(alpha, rel=1e-6)
    assert lower < k / n < upper


def test_clopper_pearson_closed_forms_at_the_ends():
    # k = n: P(X >= n | p) = p^n = alpha; k = 0: (1 - p)^n = alpha
    assert cp_lower(10, 10, 0.05) == pytest.approx(0.05 ** 0.1, abs=1e-10)
    assert cp_upper(0, 10, 0.05) == pytest.approx(1 - 0.05 ** 0.1, abs=1e-10)
    assert cp_lower(0, 10, 0.05) == 0.0 and cp_upper(10, 10, 0.05) == 1.0


@pytest.mark.parametrize(("n", "share", "alpha"), [(16, 0.9, 0.004), (64, 0.9, 0.004), (128, 0.99, 0.004),
                                                   (64, 0.5, 0.05), (32, 1.0, 0.01)])
def test_critical_counts_are_the_tail_quantiles_and_match_the_bounds(n, share, alpha):
    s_pass, s_fail = pass_count(n, share, alpha), fail_count(n, share, alpha)
    pmf = brute_pmf(n, share)
    ge = [float(sum(pmf[s:])) for s in range(n + 1)]
    le = [float(sum(pmf[: s + 1])) for s in range(n + 1)]
    assert s_pass == min([s for s in range(n + 1) if ge[s] <= alpha], default=n + 1)
    assert s_fail == max([s for s in range(n + 1) if le[s] <= alpha], default=-1)
    for s in range(n + 1):  # the count test is the Clopper-Pearson test
        if share < 1:
            assert (s >= s_pass) == (cp_lower(s, n, alpha) >= share - 1e-12), s
        assert (s <= s_fail) == (s < n and cp_upper(s, n, alpha) <= share + 1e-12), s


def test_looks_are_a_doubling_schedule():
    assert looks_up_to(15) == [] and looks_up_to(16) == [16] and looks_up_to(100) == [64, 32, 16]
    assert looks_up_to(10**9)[0] == FIRST_LOOK << (LOOKS - 1) and len(looks_up_to(10**9)) == LOOKS


RULE = EarlyStop(Objectives(tpot_s=1, attainment=0.9, early_stop=True, confidence=0.95))


def test_every_request_met_passes_at_the_first_look_that_can_pass():
    alpha = 0.05 / LOOKS
    need = math.ceil(math.log(alpha) / math.log(0.9))  # 0.9^n <= alpha: 52 -> the look at 64
    assert RULE.decide(LiveCounts(63, 63, 0)) is None
    v = RULE.decide(LiveCounts(64, 64, 0))
    assert need <= 64 and v.verdict == "pass" and v.bounds[0].look == 64
    assert v.bounds[0].bound == pytest.approx(alpha ** (1 / 64), abs=1e-9) and v.bounds[0].bound >= 0.9


def test_running_requests_count_against_a_pass_and_for_a_fail():
    # 64 met, but 10 more still running: counted as misses, 64 - 10 of the first 64 is not enough
    assert RULE.decide(LiveCounts(64, 64, 10)) is None
    # look 128: 128 - 10 = 118 < s_pass(128, 0.9, alpha / 12) = 124; look 256: 256 - 10 >= 243
    assert pass_count(128, 0.9, 0.05 / LOOKS) == 124 and pass_count(256, 0.9, 0.05 / LOOKS) == 243
    assert RULE.decide(LiveCounts(128, 128, 10)) is None
    assert RULE.decide(LiveCounts(256, 256, 10)).verdict == "pass"
    # 12 misses in 16 finished, 20 running (counted as hits): among the first 16, at most 16 hits
    assert RULE.decide(LiveCounts(16, 4, 20)) is None
    v = RULE.decide(LiveCounts(20, 4, 2))  # n = 22 -> look 16: at most 4 + 2 = 6 hits of 16
    assert v.verdict == "fail" and v.bounds[0].bound <= 0.9 and v.requests == 22


def test_a_fail_needs_fewer_hits_with_more_objectives_and_a_per_token_itl_limit_never_passes():
    two = EarlyStop(Objectives(attainment=0.9, early_stop=True, limits=(("ttft_p90_s", 1.0),)))
    # alpha split over 2 questions for a fail: s_fail(16, 0.9, alpha / 12 / 2)
    s_fail = fail_count(16, 0.9, 0.05 / LOOKS / 2)
    assert two.decide(LiveCounts(16, 16, 0, (("ttft_p90_s", s_fail, 16),))).verdict == "fail"
    assert two.decide(LiveCounts(16, 16, 0, (("ttft_p90_s", s_fail + 1, 16),))) is None
    itl = EarlyStop(Objectives(attainment=0.9, early_stop=True, limits=(("itl_p99_s", 0.1),)))
    assert itl.decide(LiveCounts(1000, 1000, 0)) is None
    assert itl.decide(LiveCounts(16, 0, 0)).verdict == "fail"


def test_live_counts_count_what_the_percentile_verdict_will_judge():
    stats = StageStats()
    for v in (0.5, 0.9, 1.0, 1.05, 3.0):
        stats.ttft_s.add(v)
    obj = Objectives(early_stop=True, limits=(("ttft_p50_s", 1.0), ("itl_p99_s", 0.1)))
    live = live_counts(stats, 3, obj)
    assert live.running == 3 and [k for k, *_ in live.within] == ["ttft_p50_s"]  # ITL: not decided early
    h = stats.ttft_s
    for limit in (0.4, 0.5, 0.95, 1.0, 1.02, 2.9, 3.0, 5.0):
        within = h.count_reported_le(limit)
        for q in (0.2, 0.5, 0.6, 0.8, 0.99):
            assert (h.quantile(q) <= limit) == (within >= math.ceil(q * h.count)), (limit, q)
    assert LogHistogram().count_reported_le(1.0) == 0


# --- the wrong-verdict rate, simulated ---------------------------------------------------------------

def simulate(rule: EarlyStop, share: float, stages: int, n_max: int, seed: int) -> tuple[int, int, int]:
    """``stages`` synthetic stages whose requests hold the objective with probability ``share``;
    requests are sent in batches of 1-8 per tick, a hit finishes the tick after it was sent and a
    miss only 5 ticks later (the finished-first bias at its worst: the slow ones are the misses).
    The rule looks at every tick. Returns (early passes, early fails, undecided)."""
    rng = random.Random(seed)
    passes = fails = 0
    for _ in range(stages):
        sent = judged = met = tick = 0
        due: dict[int, list[int]] = {}  # tick -> [hits, misses] finishing then
        verdict = None
        while sent < n_max and verdict is None:
            tick += 1
            for _ in range(rng.randint(1, 8)):
                hit = rng.random() < share
                due.setdefault(tick + (1 if hit else 5), [0, 0])[0 if hit else 1] += 1
                sent += 1
            hits, misses = due.pop(tick, (0, 0))
            judged, met = judged + hits + misses, met + hits
            verdict = rule.decide(LiveCounts(judged, met, sent - judged))
        if verdict is not None:
            passes += verdict.verdict == "pass"
            fails += verdict.verdict == "fail"
    return passes, fails, stages - passes - fails


def margin(alpha: float, trials: int) -> float:
    """3 binomial standard deviations of a rate alpha estimated from ``trials``."""
    return 3 * math.sqrt(alpha * (1 - alpha) / trials)


@pytest.mark.parametrize(("share", "wrong"), [(0.88, "pass"), (0.92, "fail")])
def test_wrong_verdict_rate_is_at_most_the_asked_error(share, wrong):
    """True share just below the 0.9 target (an early pass is wrong) and just above (a fail is)."""
    rule = EarlyStop(Objectives(tpot_s=1, attainment=0.9, early_stop=True, confidence=0.8))
    stages = 1500
    passes, fails, _ = simulate(rule, share, stages, n_max=600, seed=27)
    print(f"share {share}: {passes} early passes, {fails} early fails of {stages}")
    wrong_rate = (passes if wrong == "pass" else fails) / stages
    assert wrong_rate <= 0.2 + margin(0.2, stages)
    right = fails if wrong == "pass" else passes
    assert right > 0  # the rule does decide: the test measures a rule that acts


def test_the_simulation_catches_a_rule_that_ignores_running_requests_and_repeated_looks():
    """The same simulation with a naive rule (every tick, the whole alpha, running requests left
    out) makes wrong early passes far above its alpha: the test above can fail."""

    class Naive(EarlyStop):
        def decide(self, live):
            n, hits = live.judged, live.met
            if n >= 16 and hits >= pass_count(n, 0.9, 0.2):  # Clopper-Pearson lower bound >= 0.9
                return EarlyVerdict("pass", 0.8, (), n)
            return None

    naive = Naive(Objectives(tpot_s=1, attainment=0.9, early_stop=True, confidence=0.8))
    passes, _, _ = simulate(naive, 0.88, 400, n_max=600, seed=27)
    print(f"naive rule, share 0.88: {passes} early passes of 400")
    assert passes / 400 > 0.2 + margin(0.2, 400)


# --- the stage row -----------------------------------------------------------------------------------

def test_the_row_keeps_its_final_verdict_and_says_when_the_early_one_disagrees():
    from loadgen.run.results import GuardLog, StageInfo, stage_row, stage_warnings

    stats = StageStats()
    stats.requests_ok, stats.slo.judged, stats.slo.met = 10, 10, 5  # 50 % met: fails 0.9
    obj = Objectives(tpot_s=1, attainment=0.9, early_stop=True)
    said = EarlyStop(obj).decide(LiveCounts(64, 64, 0))  # what a stale view could have decided
    info = StageInfo(0, 4, window_s=2.0, users=4, early=said)
    row = stage_row(info, stats, GuardLog(), {}, False, objectives=obj)
    early = row["slo"]["early_stop"]
    assert row["slo"]["pass"] is False and "slo_early" in row["flags"] and "slo_fail" in row["flags"]
    assert early["verdict"] == "pass" and early["agrees"] is False and early["confidence"] == 0.95
    assert early["bounds"]["attainment"] >= 0.9 and early["look_requests"] == {"attainment": 64}
    assert early["targets"] == {"attainment": 0.9}
    lines = stage_warnings(row, 64, 32)
    assert any("early SLO verdict (pass) disagrees" in line for line in lines)
    assert said.text().startswith("pass (attainment >= 91.8% (target 90%); 95% confidence, 64 requests")
