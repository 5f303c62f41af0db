"""Open loop over two worker processes: one dispatcher each, the rate split exactly between them."""

from __future__ import annotations

import json
import math

import pytest

from loadgen.sim.launch import running_sim
from tests.support.runlocust import run_locust

pytestmark = pytest.mark.integration


def test_two_workers_share_the_rate(tmp_path):
    rate = 30.0
    with running_sim("--preset", "fixed", "--ttft-ms", "50", "--itl-ms", "10") as sim:
        run = run_locust(sim.url, tmp_path / "r", "--scenario", "config/smoke.yaml", "--output-tokens", "10",
                         "--rates", f"{rate:g}", "--warmup", "2", "--stage-duration", "10",
                         "--processes", "2", timeout_s=150)
    assert run.code == 0, run.stderr[-3000:]
    summary = run.summary
    (s,) = summary["stages"]
    assert summary["run"]["workers"] == 2 and s["users"] == 2  # one dispatcher per worker
    assert s["offered_rate_per_s"] == rate and "worker_lost" not in s["flags"]
    sd = math.sqrt(rate * s["window_s"]) / s["window_s"]
    assert abs(s["scheduled_rate_per_s"] - rate) < 4 * sd  # both halves were sent, not one or three
    assert s["concurrency_mean"] == pytest.approx(s["scheduled_rate_per_s"] * s["e2e_p50_s"], rel=0.15)
    # each worker's ledger holds about half of the arrivals
    ledgers = [json.loads(p.read_text())["totals"]["c"] for p in (tmp_path / "r" / "workers").glob("*.json")]
    shares = [d.get("scheduled_requests", 0) for d in ledgers]
    assert len(shares) == 2 and min(shares) > 0.35 * sum(shares), shares
