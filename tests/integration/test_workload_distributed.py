"""A dataset across a master and 2 workers: each worker sends only its own disjoint share."""

from __future__ import annotations

import json
from contextlib import ExitStack

import pytest

from loadgen.sim.launch import running_sim
from tests.integration.test_distributed import Cluster
from tests.support.merge_check import worker_ledgers
from tests.support.runlocust import run_dir

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def test_each_worker_sends_its_own_share_of_the_dataset(tmp_path):
    data = tmp_path / "two.jsonl"
    data.write_text(json.dumps({"input_tokens": 40, "output_tokens": 8}) + "\n"
                    + json.dumps({"input_tokens": 80, "output_tokens": 16}) + "\n")
    run = ("--scenario", "config/smoke.yaml", "--set", "guard.watch=false", "--stages", "2", "--warmup", "1",
           "--stage-duration", "3", "--dataset", str(data))
    with ExitStack() as stack:
        sim = stack.enter_context(running_sim("--preset", "fixed", "--ttft-ms", "5", "--itl-ms", "2"))
        code, err = Cluster(stack, sim.url, tmp_path / "r", 2, *run).wait()
    assert code == 0, err[-3000:]
    per_worker = sorted((s.input_tokens / s.requests_ok, s.output_tokens / s.requests_ok)
                        for s in worker_ledgers(tmp_path / "r") if s.requests_ok)
    assert per_worker == [(40, 8), (80, 16)]  # line 1 on one worker only, line 2 on the other
    (stage,) = json.loads((run_dir(tmp_path / "r") / "summary.json").read_text())["stages"]
    assert stage["token_mismatch"] == {"input": 0, "output": 0, "estimated": 0}
