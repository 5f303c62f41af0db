"""Time slices in a distributed run (docs/soak.md): each worker keeps its slices and ships them in
its reports like its stages; the master merges them and closes each slice after a grace of two
worker reports. Master + 2 workers (real processes on 127.0.0.1) against the simulator."""

from __future__ import annotations

import json
from contextlib import ExitStack

import pytest

from loadgen.run_folder.slices_csv import SLICES_CSV, read_slice_rows
from loadgen.sim.launch import running_sim
from tests.integration.test_distributed import Cluster
from tests.support.merge_check import worker_ledgers
from tests.support.runlocust import run_dir

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

RUN = ("--scenario", "config/smoke.yaml", "--output-tokens", "20", "--stages", "8", "--warmup", "1",
       "--stage-duration", "9", "--slice-s", "3")


def test_a_distributed_soak_merges_every_worker_into_its_slices(tmp_path):
    with ExitStack() as stack:
        sim = stack.enter_context(running_sim("--preset", "fixed", "--ttft-ms", "20", "--itl-ms", "5"))
        cluster = Cluster(stack, sim.url, tmp_path, 2, *RUN)
        code, err = cluster.wait()
    assert code == 0, err[-3000:]
    run = run_dir(tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    (stage,) = summary["stages"]
    slices = summary["slices"]
    assert [s["slice"] for s in slices] == [0, 1, 2] and all(s["requests"] > 0 for s in slices), slices
    assert [r["requests"] for r in read_slice_rows(run / SLICES_CSV)] == [s["requests"] for s in slices]
    in_slices = sum(s["requests"] for s in slices)
    # every request completed in the window is in a slice; only the drain's (at most C) are not
    assert stage["requests"] - 8 <= in_slices <= stage["requests"], (in_slices, stage["requests"])
    assert len(worker_ledgers(tmp_path)) == 2  # both workers ran (their ledgers are the run's)
    assert "slice 0: 3/9 s" in err and stage["drift"]["drift"] is None  # 3 slices: too few for a verdict
