"""Two `--processes` runs on one host at once: each in-process master gets its own free port."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from loadgen.locust_face.plugin import _forks_workers
from loadgen.sim.launch import running_sim
from tests.support.runlocust import ROOT, locust_cmd

pytestmark = pytest.mark.integration


def test_port_rule():
    assert _forks_workers(["--processes", "2"], {})
    assert _forks_workers(["--processes=2"], {}) and _forks_workers([], {"LOCUST_PROCESSES": "2"})
    assert not _forks_workers(["--processes", "2", "--master-port", "6000"], {})
    assert not _forks_workers(["--processes", "2"], {"LOCUST_MASTER_BIND_PORT": "6000"})
    assert not _forks_workers(["--stages", "1"], {})


def test_two_processes_runs_one_second_apart_both_complete(tmp_path):
    # min_requests 1: a window lasts until one request of its own finished. Seven processes on two
    # shared cores once starved a worker through a whole 3 s window, and a stage had no request.
    args = ("--scenario", "config/smoke.yaml", "--processes", "2", "--stages", "2,4", "--set", "guard.watch=false",
            "--set", "stages.min_requests=1")
    with running_sim("--preset", "fixed", "--ttft-ms", "20", "--itl-ms", "5") as sim:
        procs = []
        for i in range(2):
            cmd = locust_cmd(sim.url, "--results-dir", str(tmp_path / f"r{i}"), *args)
            procs.append(subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                          text=True, env=dict(os.environ)))
            time.sleep(1)
        outs = []
        try:
            for p in procs:
                _, err = p.communicate(timeout=150)
                outs.append((p.returncode, err))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
    for code, err in outs:
        assert code == 0, err[-3000:]
        assert "Address already in use" not in err
    import json

    for i in range(2):
        summary = next((tmp_path / f"r{i}").rglob("summary.json"))
        s = json.loads(summary.read_text())
        assert s["run"]["workers"] == 2 and all(st["requests"] > 0 for st in s["stages"])
