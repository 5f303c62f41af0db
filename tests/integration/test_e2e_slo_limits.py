"""Percentile limits and cost figures, end to end on the simulator: that a real run judges each
stage by its measured percentile against the limit and writes the verdict, the cost figures and
the plots where they belong.

Preset ``slo-linear``: in a closed loop of C users TPOT(C) = 10 ms + 1 ms x C, so the limit
``tpot_p90_s = 0.045`` holds at C = 8 (18 ms) and fails at C = 48 (58 ms), each far from it: a
busy machine only delays the client's stamps, which adds to a measured TPOT, so 48 cannot pass,
and 8 would need 27 ms of delay per token to fail. This file therefore runs beside others. The
search's known answers next to the limit (closed loop and rate mode) are played on a virtual
clock by the run's own plan: tests/unit/whatif/test_slo_answers.py.
"""

from __future__ import annotations

import pytest

from loadgen.sim.launch import running_sim
from tests.support.runlocust import run_locust

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

RUN = ("--scenario", "config/smoke.yaml", "--input-tokens", "16", "--output-tokens", "40",
       "--warmup", "1", "--stage-duration", "2")


def test_a_percentile_limit_judges_each_stage_and_the_stages_are_priced(tmp_path):
    with running_sim("--preset", "slo-linear") as sim:
        run = run_locust(sim.url, tmp_path / "p90", *RUN, "--stages", "8,48", "--slo", "tpot_p90_s=0.045",
                         "--gpus", "2", "--gpu-hour-usd", "3", timeout_s=100, plots=True)
    assert run.code == 0, run.stderr[-3000:]
    s = run.summary
    answer = s["slo"]
    assert answer["objectives"] == {} and answer["limits"] == {"tpot_p90_s": 0.045}
    assert answer["max_concurrency"] == 8 and answer["bracket"] == [8, 48]
    assert [(st["concurrency"], st["slo"]["pass"]) for st in s["stages"]] == [(8, True), (48, False)]
    for st in s["stages"]:
        slo = st["slo"]
        verdict = slo["limits"]["tpot_p90_s"]
        assert slo["attainment"] == 1.0  # no per-request objective: every request succeeded
        assert verdict["samples"] == st["requests"]  # one TPOT per ok request (40 tokens each)
        assert slo["pass"] == verdict["pass"] == (verdict["measured_s"] <= 0.045)
        assert slo["failed"] == ([] if slo["pass"] else ["tpot_p90_s"])
        assert ("slo_fail" in st["flags"]) == (not slo["pass"])
        # cost: 2 GPUs at 3 $/h = 6 $/h over the stage's own output tokens per hour
        out = st["output_tokens_per_s"]
        assert st["output_tokens_per_gpu_per_s"] == pytest.approx(out / 2)
        assert st["usd_per_million_output_tokens"] == pytest.approx(6 / (out * 3600) * 1e6)
        assert st["usd_per_million_total_tokens"] < st["usd_per_million_output_tokens"]
    assert "failed the SLO: TPOT p90" in run.stderr and "C=48" in run.stderr
    assert "SLO: max concurrency C=8 (tpot_p90_s <= 0.045, 99% of requests ok held" in run.stderr
    csv_head = (run.run_dir / "stages.csv").read_text().splitlines()[0].split(",")
    assert {"slo.limits.tpot_p90_s.measured_s", "slo.limits.tpot_p90_s.pass", "usd_per_million_output_tokens",
            "output_tokens_per_gpu_per_s"} <= set(csv_head)
    assert (run.run_dir / "pareto.png").is_file()
