"""The SLO search's known answers in virtual time: the run's own plan (``loadgen.run.plan.plan_of``),
accounting (StageStats, ``stage_row``) and summary (``build_summary``), played by the what-if on the
simulator's engine (``loadgen.whatif.virtual_sweep``) instead of wall-clock runs against it.

Preset ``slo-linear``: the decode step takes 10 ms + 1 ms per running sequence, so in a closed loop
of C users every request's TPOT(C) = 10 ms + 1 ms x C: tpot <= 45 ms holds for C <= 35 and fails
from C = 36. On the virtual clock no late stamp moves a figure, so every stage's verdict is the
analytic one, the stages next to 35 included (the wall-clock runs could not assert C = 33..37).
The wiring (that a real run writes these verdicts, flags, columns and lines) is in
tests/integration/test_e2e_slo_limits.py and test_e2e_slo_early.py; that the virtual engine keeps
the real simulator's time is tests/integration/test_predict_vs_http.py's.
"""

from __future__ import annotations

import json

import pytest

from loadgen.whatif.__main__ import main

ANALYTIC_MAX_C = 35  # the largest C with 10 ms + 1 ms x C <= 45 ms


def tpot(c: int) -> float:
    return 0.010 + 0.001 * c
# 16 + 40 tokens, 1 s warmup, 2 s stages: the wall-clock runs' stages (tests/integration/test_e2e_slo*.py)
RUN = ("--input-tokens", "16", "--output-tokens", "40", "--warmup-s", "1", "--duration-s", "2")


def whatif(tmp_path, name: str, *args: str) -> dict:
    out = tmp_path / name
    assert main(["whatif", "slo-linear", *RUN, *args, "--slo-search", "--out", str(out), "--no-plots"]) == 0
    return json.loads((out / "summary.json").read_text())


def converged_near(s: dict, analytic: float) -> tuple[float, float]:
    """The checks every search shares: it converged to a bracket within its resolution (10 % of the
    lower end), whose lower end is within that resolution of the ``analytic`` maximum."""
    answer = s["slo"]
    lo, hi = answer["bracket"]
    assert answer["search"]["converged"] and hi - lo <= max(1, 0.1 * lo)
    assert abs(answer["max_concurrency"] - analytic) <= answer["search"]["resolution"] * lo
    return lo, hi


def test_the_attainment_search_lands_next_to_the_analytic_maximum(tmp_path):
    """Was tests/integration/test_e2e_slo.py's search (wall clock, solo): the sweep 16, 32, 48
    brackets 35 as [32, 48]; the bisection measures 40, 36 (fail) and 34 (pass)."""
    s = whatif(tmp_path, "attainment", "--stages", "16,32,48", "--slo", "tpot_s=0.045", "--attainment", "0.9")
    lo, hi = converged_near(s, ANALYTIC_MAX_C)
    assert (lo, hi) == (34, 36) and s["slo"]["objectives"] == {"tpot_s": 0.045}
    assert [(st["concurrency"], st["search"]) for st in s["stages"]] == [
        (16, False), (32, False), (48, False), (40, True), (36, True), (34, True)]
    assert s["slo"]["search"]["stages"] == [40, 36, 34]
    for st in s["stages"]:
        c = st["concurrency"]
        assert st["slo"]["pass"] == (c <= ANALYTIC_MAX_C), c  # every stage, 33..37 too
        assert st["slo"]["attainment"] == (1.0 if c <= ANALYTIC_MAX_C else 0.0)  # one TPOT for all
        # TPOT(C), or up to 3 % under it: a user's next request joins the batch a step late, so
        # fewer than C sequences decode at times (about 2 % fewer)
        assert 0.97 * tpot(c) <= st["tpot_p50_s"] <= tpot(c), c
        assert ("slo_search" in st["flags"]) == st["search"] and ("slo_fail" in st["flags"]) == (not st["slo"]["pass"])
        if st["slo"]["attainment"] == 1.0:  # goodput is then the whole token stream
            assert st["goodput_output_tokens_per_s"] == pytest.approx(st["output_tokens_per_s"])
        else:
            assert st["goodput_output_tokens_per_s"] == st["goodput_requests_per_s"] == 0.0


def test_a_percentile_limit_alone_finds_the_analytic_maximum(tmp_path):
    """Was tests/integration/test_e2e_slo_limits.py's closed-loop search (wall clock, solo): the
    limit tpot_p90_s = 0.045 with no per-request objective; 16, 32, 40 bracket 35 as [32, 40],
    the search measures 36 (fail) and 34 (pass), each verdict the stage's own p90 against the limit."""
    s = whatif(tmp_path, "p90", "--stages", "16,32,40", "--slo", "tpot_p90_s=0.045")
    lo, hi = converged_near(s, ANALYTIC_MAX_C)
    answer = s["slo"]
    assert (lo, hi) == (34, 36) and answer["objectives"] == {} and answer["limits"] == {"tpot_p90_s": 0.045}
    assert [(st["concurrency"], st["search"]) for st in s["stages"]] == [
        (16, False), (32, False), (40, False), (36, True), (34, True)]
    p90 = []
    for st in s["stages"]:
        c, slo = st["concurrency"], st["slo"]
        verdict = slo["limits"]["tpot_p90_s"]
        assert slo["attainment"] == 1.0  # no per-request objective: every request succeeded
        assert verdict["samples"] == st["requests"]  # one TPOT per ok request (40 tokens each)
        assert slo["pass"] == verdict["pass"] == (verdict["measured_s"] <= 0.045) == (c <= ANALYTIC_MAX_C), c
        assert slo["failed"] == ([] if slo["pass"] else ["tpot_p90_s"])
        # the measured p90 is TPOT(C) less the late join's up to 3 %, as a LogHistogram quantile
        # (within 1.16 % of the sample)
        assert 0.97 * tpot(c) / 1.0116 <= verdict["measured_s"] <= tpot(c) * 1.0116, c
        p90.append(verdict["measured_s"])
    assert p90[:3] == sorted(p90[:3])


ANALYTIC_MAX_RATE = 35 / 1.8


def test_the_search_in_rate_mode_lands_next_to_the_analytic_rate(tmp_path):
    """Was tests/integration/test_e2e_slo_limits.py's rate search (wall clock, solo). Open loop,
    constant arrivals: at r req/s each request runs ~40 steps, so by Little's law the batch holds
    L = 0.4 r / (1 - 0.04 r) and TPOT = 10 ms + 1 ms x L <= 45 ms <=> r <= 35 / 1.8 = 19.4 req/s.
    The sweep 16, 21 brackets it; the search bisects to 18.5 (passes), then 19.8 (fails). The 16 s
    warmup lets each stage's batch settle (time constant ~6-9 s near saturation)."""
    s = whatif(tmp_path, "rate", "--rates", "16,21", "--slo", "tpot_p50_s=0.045", "--warmup-s", "16")
    answer = s["slo"]
    lo, hi = answer["bracket"]
    assert answer["load"] == "rate_per_s" and answer["search"]["converged"] and hi - lo <= 0.1 * lo
    assert abs(lo - ANALYTIC_MAX_RATE) <= answer["search"]["resolution"] * lo
    assert [(st["offered_rate_per_s"], st["search"], st["slo"]["pass"]) for st in s["stages"]] == [
        (16, False, True), (21, False, False), (18.5, True, True), (19.8, True, False)]
    assert answer["search"]["stages"] == [18.5, 19.8] and (lo, hi) == (18.5, 19.8)
    for st in s["stages"]:
        assert st["concurrency"] is None and ("slo_search" in st["flags"]) == st["search"]
        verdict = st["slo"]["limits"]["tpot_p50_s"]
        assert st["slo"]["pass"] == verdict["pass"] == (verdict["measured_s"] <= 0.045)
    # below saturation the stage settles at its steady state: 18.5 req/s -> L = 28.5, TPOT 38.5 ms
    search = {st["offered_rate_per_s"]: st["slo"]["limits"]["tpot_p50_s"]["measured_s"] for st in s["stages"]}
    r = 18.5
    assert search[r] == pytest.approx(0.010 + 0.001 * 0.4 * r / (1 - 0.04 * r), abs=0.0015)
