"""The client-bound self-check, end to end: real locust runs against the simulator.

A client whose gevent loop is hogged (tests/fixtures/burn_locustfile.py: 150 ms CPU bursts without
yielding) must get its stage flagged ``client_bound`` in summary.json, with the CPU % and loop-lag
p99 that explain why, and the exporter's client gauges must show it while it runs. The same run
without the burner must not be flagged.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
import urllib.request

import pytest

from loadgen.sim.launch import running_sim
from tests.support.runlocust import ROOT, LocustRun, locust_cmd, run_locust

pytestmark = [pytest.mark.integration, pytest.mark.solo, pytest.mark.alone]  # judges CPU and loop lag; burns a core

SIM = ("--preset", "fixed", "--ttft-ms", "50", "--itl-ms", "10")
# 64 in / 32 out tokens: ~0.4 s per request, so each user makes ~15 requests in the window
RUN = ("--scenario", "config/smoke.yaml", "--stages", "4", "--warmup", "1", "--stage-duration", "6")
BURN = str(ROOT / "tests" / "fixtures" / "burn_locustfile.py")
LAG_MAX_S, CPU_MAX = 0.05, 90.0  # the scenario defaults (client_check)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gauge(text: str, name: str) -> float | None:
    m = re.search(rf"^{name}{{[^}}]*}} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def _run_with_scrapes(host: str, results_dir, *args: str, port: int) -> tuple[LocustRun, list[tuple]]:
    """Run locust in the background; scrape its exporter every 0.5 s while it runs."""
    cmd = locust_cmd(host, "--results-dir", str(results_dir), "--exporter-port", str(port), *args)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ))
    scrapes = []
    try:
        deadline = time.monotonic() + 90
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                    text = resp.read().decode()
            except OSError:
                continue  # not up yet, or already shut down
            scrapes.append((_gauge(text, "llm_loadgen_client_cpu_percent"),
                            _gauge(text, "llm_loadgen_client_loop_lag_seconds")))
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return LocustRun(proc.returncode, out, err, results_dir), scrapes


@pytest.fixture(scope="module")
def sim():
    with running_sim(*SIM) as s:
        yield s


def _only_stage(run: LocustRun) -> dict:
    assert run.code == 0, run.stderr[-3000:]
    (stage,) = run.summary["stages"]
    assert stage["requests"] >= 20 and stage["error_count"] == 0, stage
    return stage


def test_a_healthy_run_is_not_flagged(sim, tmp_path):
    stage = _only_stage(run_locust(sim.url, tmp_path / "healthy", *RUN, timeout_s=90))
    client = stage["client"]
    assert client["processes"] == 1
    assert 0 < client["cpu_percent"] < CPU_MAX
    assert client["loop_lag_p99_s"] < LAG_MAX_S
    assert "client_bound" not in stage["flags"]
    # known answer (50 ms TTFT): a healthy client measures it within a few ms
    assert stage["ttft_p50_s"] == pytest.approx(0.050, abs=0.005)


def test_an_overloaded_client_is_flagged_and_its_gauges_show_it(sim, tmp_path):
    run, scrapes = _run_with_scrapes(sim.url, tmp_path / "burn", *RUN, "-f", BURN, port=_free_port())
    stage = _only_stage(run)
    client = stage["client"]
    assert "client_bound" in stage["flags"], client
    # a 50 ms sleep asked just before a 150 ms burst wakes ~100 ms late
    assert client["loop_lag_p99_s"] >= 0.08
    # the burner keeps a core busy; on a shared machine the OS may give the process less than all of it
    assert client["cpu_percent"] >= 50
    assert "CLIENT-BOUND" in run.stderr
    # the live gauges were fed while the burner ran (a max over the last 5 s each)
    lags = [lag for _, lag in scrapes if lag is not None]
    cpus = [cpu for cpu, _ in scrapes if cpu is not None]
    assert lags and max(lags) >= 0.08, scrapes
    assert cpus and max(cpus) >= 50, scrapes


def test_an_overloaded_worker_flags_the_stage_on_the_master(sim, tmp_path):
    """--processes 1: the burner runs in the worker; the master judges from its reports."""
    run, scrapes = _run_with_scrapes(sim.url, tmp_path / "burn-dist", *RUN, "-f", BURN, "--processes", "1",
                                     port=_free_port())
    stage = _only_stage(run)
    assert "client_bound" in stage["flags"], stage["client"]
    assert stage["client"]["processes"] == 1
    assert stage["client"]["loop_lag_p99_s"] >= 0.08
    lags = [lag for _, lag in scrapes if lag is not None]
    assert lags and max(lags) >= 0.08, scrapes
