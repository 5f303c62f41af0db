"""Capacity under an SLO, end to end: the two ends of the search, where no stage passes and where
every stage passes (preset ``slo-linear``, TPOT(C) = 10 ms + 1 ms x C; the search itself next to
its answer is played on a virtual clock in tests/unit/whatif/test_slo_answers.py, and end to
end, far from it, in tests/integration/test_e2e_slo_early.py).

Both verdicts are far from their objective, so they need no quiet machine and run beside other
files: a busy machine only delays the client's stamps, which adds to a measured TPOT and TTFT and
never subtracts. TPOT(4) = 14 ms against 11 ms cannot pass that way (a request decoding alone, the
least the server can do, takes 11 ms a token, and four users keep the batch fuller than that); at
C = 8, TPOT 18 ms against 45 ms and TTFT (a few ms) against 1 s would need 27 ms of client delay
per token to fail.
"""

from __future__ import annotations

import pytest

from loadgen.sim.launch import running_sim
from tests.support.runlocust import run_locust

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

RUN = ("--scenario", "config/smoke.yaml", "--input-tokens", "16", "--output-tokens", "40",
       "--warmup", "1", "--stage-duration", "2")


def run_slo(tmp_path, name, *args):
    with running_sim("--preset", "slo-linear") as sim:
        run = run_locust(sim.url, tmp_path / name, *RUN, *args, timeout_s=200)
    assert run.code == 0, run.stderr[-3000:]
    return run


def test_no_stage_passes_max_concurrency_is_null_and_said_plainly(tmp_path):
    """TPOT(4) = 14 ms > 11 ms: nothing passes; the search has nothing to bisect."""
    run = run_slo(tmp_path, "none", "--stages", "4,8", "--slo", "tpot_s=0.011", "--slo-search")
    answer = run.summary["slo"]
    assert answer["max_concurrency"] is None and answer["bracket"] == [None, 4]
    assert answer["search"]["stages"] == []
    assert [st["slo"]["attainment"] for st in run.summary["stages"]] == [0.0, 0.0]
    assert [st["goodput_requests_per_s"] for st in run.summary["stages"]] == [0.0, 0.0]
    assert "SLO: no stage met tpot_s <= 0.011" in run.stderr and "max concurrency: none" in run.stderr


def test_every_stage_passes_the_bracket_is_open_above(tmp_path):
    run = run_slo(tmp_path, "all", "--stages", "4,8", "--slo", "tpot_s=0.045,ttft_s=1", "--slo-search")
    answer = run.summary["slo"]
    assert answer["max_concurrency"] == 8 and answer["bracket"] == [8, None]
    assert answer["search"]["stages"] == []
    for st in run.summary["stages"]:
        assert st["slo"]["attainment"] == 1.0 and st["slo"]["attainment_by"] == {"ttft_s": 1.0, "tpot_s": 1.0}
    assert "every stage passed" in run.stderr and "limit is above C=8" in run.stderr
