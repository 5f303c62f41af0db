"""Nothing gathered is lost: results are written on every way a run can stop (issue 7).

Normal end (exit 0), guard abort (exit 3), Ctrl-C and SIGTERM mid-run (exit 130, "interrupted"),
fatal error (connection refused at start: exit 4, "error"). Real `locust -f locustfile.py` runs
against one shared simulator.

Locust 2.47 itself, in a headless run with a shape, handles Ctrl-C (KeyboardInterrupt -> quitting
-> exit code) but installs its SIGTERM handler only after the shape has finished, so SIGTERM
mid-run used to kill the process with summary.json half-written; loadgen.locust_face.plugin maps
SIGTERM to the Ctrl-C path.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from loadgen import errors
from tests.support.ports import free_port
from tests.support.runlocust import ROOT, SMOKE, fixed_sim, locust_cmd, run_dir, run_locust

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

sim = fixed_sim  # the module's simulator: 20 tokens x 5 ms, 0.12 s requests; --output-tokens 400: 2 s


def summary(results: Path) -> dict:
    return json.loads((run_dir(results) / "summary.json").read_text())


def llm_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("llm-loadgen:")]


def test_normal_end_writes_every_stage_and_exit_0(sim, tmp_path):
    run = run_locust(sim.url, tmp_path / "res", *SMOKE, "--stages", "1,2")
    assert run.code == errors.EXIT_OK, run.stderr[-3000:]
    s = run.summary
    assert s["run"]["stop_reason"] == "completed" and s["run"]["exit_code"] == 0
    assert s["run"]["ended_at"] is not None
    assert [st["concurrency"] for st in s["stages"]] == [1, 2]
    assert all(st["requests"] > 0 and "drain_timeout" not in st["flags"] for st in s["stages"])
    assert (run.run_dir / "stages.csv").is_file()


def test_guard_abort_writes_completed_stages_and_exit_3(sim, tmp_path):
    # 64 + 20 tokens a request: 300 KV tokens fit 3 streams; stage 4 is refused before it starts
    run = run_locust(sim.url, tmp_path / "res", *SMOKE, "--stages", "1,2,4,8", "--kv-capacity-tokens", "300")
    assert run.code == errors.EXIT_GUARD_ABORT, run.stderr[-3000:]
    s = run.summary
    assert s["run"]["stop_reason"] == "guard_abort" and s["run"]["exit_code"] == errors.EXIT_GUARD_ABORT
    assert s["guard"]["stopped_before"] == 4
    assert [st["concurrency"] for st in s["stages"]] == [1, 2]
    assert all(st["requests"] > 0 for st in s["stages"])
    assert s["run"]["ended_at"] is not None


def _interrupt(sim, results: Path, sig: int, after: str, *args: str) -> tuple[int, str]:
    """Start a run, send ``sig`` as soon as a stderr line contains ``after``; (exit code, stderr)."""
    proc = subprocess.Popen(locust_cmd(sim.url, "--results-dir", str(results), *args),
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if after in line:
                proc.send_signal(sig)
                break
        else:
            raise AssertionError(f"never saw {after!r}: {''.join(seen)[-3000:]}")
        rest = proc.stderr.read()
        return proc.wait(timeout=60), "".join(seen) + rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _interrupt_at_stage(sim, results: Path, sig: int, stage: int, *args: str) -> tuple[int, str]:
    """Start a run with the exporter on; send ``sig`` as soon as its ``llm_loadgen_stage`` gauge
    reads ``stage`` (the console says nothing then: the next stage's ramp line waits for the
    earlier row). Returns (exit code, stderr)."""
    port = free_port()
    proc = subprocess.Popen(locust_cmd(sim.url, "--results-dir", str(results), "--exporter-port", str(port),
                                       *args), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    text = r.read().decode()
            except OSError:
                text = ""
            if re.search(rf"^llm_loadgen_stage{{[^}}]*}} {stage}\.0$", text, flags=re.M):
                proc.send_signal(sig)
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"never saw stage {stage}: {proc.stderr.read()[-3000:] if proc.poll() is not None else ''}")
        return proc.wait(timeout=60), proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_ctrl_c_right_after_a_window_closed_keeps_that_stage(sim, tmp_path):
    """Stage 0's window has closed but its ~2 s request is still running: it is written anyway."""
    results = tmp_path / "res"
    code, err = _interrupt_at_stage(sim, results, signal.SIGINT, 1,
                                    *SMOKE, "--stages", "1,2,4", "--output-tokens", "400",
                                    "--set", "stages.duration_s=0.5")
    assert code == errors.EXIT_INTERRUPTED, err[-3000:]
    s = summary(results)
    assert s["run"]["stop_reason"] == "interrupted" and s["run"]["exit_code"] == errors.EXIT_INTERRUPTED
    (stage,) = s["stages"]
    assert stage["concurrency"] == 1 and stage["window_s"] > 0
    assert "interrupted" in stage["flags"] and stage["unfinished_requests"] == 1
    assert s["run"]["ended_at"] is not None  # the quit path ran to the end
    assert "Traceback" not in err


def test_sigterm_mid_stage_keeps_completed_stages_exit_130(sim, tmp_path):
    results = tmp_path / "res"
    # the table header comes with the first stage's row, printed when stage 0 is final; stage 1
    # is then ramping, warming up or measured
    code, err = _interrupt(sim, results, signal.SIGTERM, "tok mismatch", *SMOKE, "--stages", "1,2,4")
    assert code == errors.EXIT_INTERRUPTED, err[-3000:]
    s = summary(results)
    assert s["run"]["stop_reason"] == "interrupted" and s["run"]["exit_code"] == errors.EXIT_INTERRUPTED
    (stage,) = s["stages"]
    assert stage["concurrency"] == 1 and stage["requests"] > 0 and "interrupted" not in stage["flags"]
    assert s["run"]["ended_at"] is not None
    assert "interrupted; results in" in err and "Traceback" not in err


def test_connection_refused_at_start_is_one_line_exit_4_and_a_summary(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    run = run_locust(url, tmp_path / "res", *SMOKE, "--stages", "1,2", timeout_s=60)
    assert run.code == errors.EXIT_SERVER_UNUSABLE, run.stderr[-3000:]
    lines = llm_lines(run.stderr)
    (msg,) = [ln for ln in lines if "cannot connect" in ln]
    assert url in msg and "--host" in msg
    assert "Traceback" not in run.stderr and "connect_failed" not in run.stderr  # no failure flood
    s = run.summary
    assert s["run"]["stop_reason"] == "error" and s["run"]["exit_code"] == errors.EXIT_SERVER_UNUSABLE
    assert s["stages"] == [] and s["totals"]["errors"] == {}
