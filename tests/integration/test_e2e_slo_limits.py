"""Percentile limits and cost figures, end to end on the simulator with a known answer.

Preset ``slo-linear`` (as tests/integration/test_e2e_slo.py): the decode step takes 10 ms + 1 ms per running
sequence, so in a closed loop of C users every request's TPOT(C) = 10 ms + 1 ms x C, and the
stage's TPOT p90 is that too: the limit ``tpot_p90_s = 0.045`` holds for C <= 35 and fails from
C = 36, with no per-request objective at all (the stage's attainment is then the share of
requests that succeeded). The sweep 16, 32, 40 brackets it as [32, 40] (TPOT(40) = 50 ms, 5 ms
over the limit); the search (36, then 34 or 38) must land within its resolution (10 % of the lower
end) of 35. A sweep up to 64 would add C = 64 and 48 (9 s and 8 s stages) to a bisection like the
one tests/integration/test_e2e_slo.py runs from [32, 48].

What is asserted and why: each stage's verdict is its measured p90 (a LogHistogram quantile,
within 1.16 % of the sample) against the limit, equal passing; the measured p90 grows with C by
1 ms per user (16 ms, then 8 ms between sweep stages); stages within 2 ms of the limit
(C = 33..37) are not asserted either way, because the measured TPOT is not exactly TPOT(C): a
user's next request joins the batch a step late (fewer than C sequences decode at times, about 2 %
less), and a busy shared machine stamps a few chunks late (more). The 8 ms from C = 32 to 40 is
asserted as more than 4 ms: each p90 is within 0.6 ms of its sample, and the late join lowers
both by under 1 ms (2 % of 42 and 50 ms).
"""

from __future__ import annotations

import pytest

from loadgen.sim.launch import running_sim
from tests.support.runlocust import run_locust

pytestmark = [pytest.mark.integration, pytest.mark.solo, pytest.mark.timeout(240)]  # TPOT vs the analytic answer

ANALYTIC_MAX_C = 35  # the largest C with 10 ms + 1 ms x C <= 45 ms
RUN = ("--scenario", "config/smoke.yaml", "--input-tokens", "16", "--output-tokens", "40",
       "--warmup", "1", "--stage-duration", "2")


def search_run(tmp_path, name: str, analytic: float, *args: str, timeout_s: float = 200):
    """A run on slo-linear with ``args``; its summary, after the checks every search shares: it
    converged, and its answer is within the resolution of the ``analytic`` maximum."""
    with running_sim("--preset", "slo-linear") as sim:
        run = run_locust(sim.url, tmp_path / name, *RUN, *args, "--slo-search", timeout_s=timeout_s)
    assert run.code == 0, run.stderr[-3000:]
    answer = run.summary["slo"]
    lo, hi = answer["bracket"]
    assert answer["search"]["converged"] and hi - lo <= max(1, 0.1 * lo)
    assert abs(answer["max_concurrency"] - analytic) <= answer["search"]["resolution"] * lo
    return run


def test_a_percentile_limit_alone_finds_the_analytic_maximum_and_the_stages_are_priced(tmp_path):
    run = search_run(tmp_path, "p90", ANALYTIC_MAX_C, "--stages", "16,32,40", "--slo", "tpot_p90_s=0.045",
                     "--gpus", "2", "--gpu-hour-usd", "3")
    s = run.summary
    answer = s["slo"]
    lo, hi = answer["bracket"]
    assert answer["objectives"] == {} and answer["limits"] == {"tpot_p90_s": 0.045}
    sweep = [st for st in s["stages"] if not st["search"]]
    assert [st["concurrency"] for st in sweep] == [16, 32, 40]
    assert [st["slo"]["pass"] for st in sweep] == [True, True, False]
    assert len(s["stages"]) > 3  # the search ran, decided from the percentile verdicts
    for st in s["stages"]:
        c, slo = st["concurrency"], st["slo"]
        verdict = slo["limits"]["tpot_p90_s"]
        assert slo["attainment"] == 1.0  # no per-request objective: every request succeeded
        assert verdict["samples"] == st["requests"]  # one TPOT per ok request (40 tokens each)
        assert slo["pass"] == verdict["pass"] == (verdict["measured_s"] <= 0.045)
        assert slo["failed"] == ([] if slo["pass"] else ["tpot_p90_s"])
        assert ("slo_fail" in st["flags"]) == (not slo["pass"])
        if not 33 <= c <= 37:
            assert slo["pass"] == (c <= ANALYTIC_MAX_C), c
        # cost: 2 GPUs at 3 $/h = 6 $/h over the stage's own output tokens per hour
        out = st["output_tokens_per_s"]
        assert st["output_tokens_per_gpu_per_s"] == pytest.approx(out / 2)
        assert st["usd_per_million_output_tokens"] == pytest.approx(6 / (out * 3600) * 1e6)
        assert st["usd_per_million_total_tokens"] < st["usd_per_million_output_tokens"]
    p90 = [st["slo"]["limits"]["tpot_p90_s"]["measured_s"] for st in sweep]
    assert p90 == sorted(p90) and p90[1] - p90[0] > 0.008 and p90[2] - p90[1] > 0.004
    failing = next(st for st in sweep if not st["slo"]["pass"])
    assert "failed the SLO: TPOT p90" in run.stderr and f"C={failing['concurrency']}" in run.stderr
    assert f"SLO: max concurrency C={lo} (tpot_p90_s <= 0.045, 99% of requests ok held" in run.stderr
    csv_head = (run.run_dir / "stages.csv").read_text().splitlines()[0].split(",")
    assert {"slo.limits.tpot_p90_s.measured_s", "slo.limits.tpot_p90_s.pass", "usd_per_million_output_tokens",
            "output_tokens_per_gpu_per_s"} <= set(csv_head)
    assert (run.run_dir / "pareto.png").is_file()


# --- rate mode --------------------------------------------------------------------------------------
# Open loop on the same preset: at a constant rate r each request runs about 40 steps (40 output
# tokens, prefill free), so by Little's law the batch holds L = r x 40 x (10 ms + 1 ms x L), that
# is L = 0.4 r / (1 - 0.04 r), and TPOT = 10 ms + 1 ms x L. TPOT <= 45 ms <=> L <= 35 <=>
# r <= 35 / 1.8 = 19.4 req/s. The sweep 16, 21 req/s brackets it as [16, 21] (TPOT 28 and 62 ms
# at steady state); the search bisects to 18.5 (38 ms: passes), then 19.8 (48 ms), and either verdict
# there leaves a bracket within 10 % ([18.5, 19.8] or [19.8, 21]) whose lower end is within 10 % of 19.4.
# Near saturation the batch settles slowly: dL/dt = r - f(L), f(L) = L / (0.4 + 0.04 L) the
# completion rate, time constant 1 / f'(L): ~6 s at 18.5 req/s, ~9 s at 19.8, more near 21 (a
# request lives 1.7 s). A search stage starts from the backlog the failing stage above it left (its
# dispatcher kept offering that rate until its requests finished). Integrating dL/dt stage after
# stage with a 16 s warmup: 21 req/s (from 16's L = 18) is at 53 ms by its window (fails by 8 ms);
# 18.5 req/s (from 21's backlog) is at 40-41 ms (passes by 4 ms; steady 38 ms). A top stage of
# 22 req/s leaves far more backlog: 19 req/s after it, even with a 20 s warmup, was still at 44-45 ms
# by the same integration and failed on a busy machine (answer 17.5). A nearer top stage settles
# the search stage sooner than a longer warmup would.
ANALYTIC_MAX_RATE = 35 / 1.8


@pytest.mark.timeout(330)
def test_the_search_in_rate_mode_lands_within_its_resolution_of_the_analytic_rate(tmp_path):
    run = search_run(tmp_path, "rate", ANALYTIC_MAX_RATE, "--rates", "16,21", "--arrival", "constant",
                     "--warmup", "16", "--slo", "tpot_p50_s=0.045", timeout_s=300)
    s = run.summary
    answer = s["slo"]
    lo, hi = answer["bracket"]
    assert answer["load"] == "rate_per_s" and hi - lo <= 0.1 * lo
    sweep = [st for st in s["stages"] if not st["search"]]
    search = [st for st in s["stages"] if st["search"]]
    assert [st["offered_rate_per_s"] for st in sweep] == [16, 21]
    assert [st["slo"]["pass"] for st in sweep] == [True, False]
    assert [st["offered_rate_per_s"] for st in search] == answer["search"]["stages"] and search[0]["offered_rate_per_s"] == 18.5
    for st in s["stages"]:
        assert st["concurrency"] is None and ("slo_search" in st["flags"]) == st["search"]
        verdict = st["slo"]["limits"]["tpot_p50_s"]
        assert st["slo"]["pass"] == verdict["pass"] == (verdict["measured_s"] <= 0.045)
    assert f"SLO: max rate {lo:g} req/s" in run.stderr and "search stages 18.5" in run.stderr
