"""SLO early stop end to end on the simulator: an SLO run with ``--slo-early-stop`` whose stages all
close early, with the answer the run gives without it.

Preset ``slo-linear``: TPOT(C) = 10 ms + 1 ms x C in a closed loop of C users, so the objective
tpot_s = 0.045 holds for C <= 35 (tests/unit/whatif/test_slo_answers.py checks that answer on a
virtual clock, the run's own plan playing it):
here at C=8 (18 ms) and at the one search stage C=28 (38 ms), and it fails at C=48 (58 ms), each
far from the objective, so a busy machine's late stamps cannot flip a verdict. Without early stop
the answer is therefore the bracket [28, 48]. TPOT is the same for every request of a stage, so
the verdict does not depend on the attainment target; 0.5 lets a pass be decided after a few dozen
requests (at 0.99 it takes a thousand or more, docs/slo.md 'Early stop'). Every stage must close before its
10 s duration (decided after 2-8 s on a busy 2-core machine), with the verdict its whole window
then gives.

Measured on the shared 2-core machine (2026-12-02), the same run without ``--slo-early-stop``:
windows of 10 s and 42.3 s / 47.9 s of wall time; with it windows of 2-8 s and 22.0 s / 32.0 s
(docs/slo.md 'Early stop').

It is also the SLO search's end-to-end run (what the wall-clock search next to C = 35 in the former
test_e2e_slo.py asserted of the files): the search stage is flagged and in the answer, goodput,
the stages.csv columns and the console's SLO and KV lines.
"""

from __future__ import annotations

import pytest

from loadgen.sim.launch import running_sim
from tests.support.runlocust import run_locust

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

DURATION_S = 10
RUN = ("--scenario", "config/smoke.yaml", "--input-tokens", "16", "--output-tokens", "20", "--warmup", "1",
       "--stage-duration", str(DURATION_S), "--stages", "8,48", "--slo",
       "tpot_s=0.045,attainment=0.5,max_search_stages=1", "--slo-search", "--slo-early-stop")


def test_early_stop_closes_each_window_once_decided_and_gives_the_answer_of_a_full_run(tmp_path):
    with running_sim("--preset", "slo-linear") as sim:
        run = run_locust(sim.url, tmp_path / "early", *RUN, timeout_s=100)
    assert run.code == 0, run.stderr[-3000:]
    s = run.summary
    assert s["slo"]["bracket"] == [28, 48] and s["slo"]["max_concurrency"] == 28
    assert [st["concurrency"] for st in s["stages"]] == [8, 48, 28]
    for st in s["stages"]:
        verdict = st["slo"]["early_stop"]
        assert verdict["verdict"] == ("pass" if st["concurrency"] <= 28 else "fail")
        assert verdict["agrees"] and st["slo"]["pass"] == (verdict["verdict"] == "pass")
        assert "slo_early" in st["flags"] and st["window_s"] < DURATION_S
        bound = verdict["bounds"]["attainment"]
        assert (bound >= 0.5) if verdict["verdict"] == "pass" else (bound <= 0.5)
        assert verdict["look_requests"]["attainment"] <= verdict["requests"] <= st["requests"]
        # the turnover rule still held: C requests finished inside the shortened window
        assert st["requests"] >= st["concurrency"] and st["users"] == st["concurrency"]
        assert ("slo_search" in st["flags"]) == st["search"] == (st["concurrency"] == 28)
        assert ("slo_fail" in st["flags"]) == (not st["slo"]["pass"])
        if st["slo"]["attainment"] == 1.0:  # goodput is then the whole token stream
            assert st["goodput_output_tokens_per_s"] == pytest.approx(st["output_tokens_per_s"])
            assert st["goodput_requests_per_s"] == pytest.approx(st["output_tokens_per_s"] / 20)
        elif st["slo"]["attainment"] == 0.0:
            assert st["goodput_output_tokens_per_s"] == st["goodput_requests_per_s"] == 0.0
    assert s["slo"]["search"]["stages"] == [28] and s["slo"]["objectives"] == {"tpot_s": 0.045}
    assert "SLO: max concurrency C=28" in run.stderr and "KV ceiling: C=" in run.stderr
    assert "(slo.early_stop)" in run.stderr and "window closed after" in run.stderr
    csv_head = (run.run_dir / "stages.csv").read_text().splitlines()[0].split(",")
    assert {"slo.early_stop.verdict", "slo.early_stop.bounds.attainment", "slo.early_stop.agrees", "search", "slo.pass",
            "slo.attainment_by.tpot_s", "goodput_output_tokens_per_s"} <= set(csv_head)
