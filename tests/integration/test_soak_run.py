"""A soak run's time slices against the simulator: written as they close, so a run killed with
SIGKILL keeps them and ``report build`` makes its report from them; SIGHUP stops a run as SIGTERM
does (results written). docs/soak.md."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from loadgen.report.__main__ import main as report_main
from loadgen.run_folder.folders import resolve_run_dir
from loadgen.run_folder.slices_csv import SLICES_CSV, read_slice_rows
from loadgen.stats.slices import slice_tolerance
from tests.support.runlocust import ROOT, SMOKE, fixed_sim, locust_cmd

pytestmark = pytest.mark.integration
sim = fixed_sim

LONG = (*SMOKE, "--stages", "2", "--stage-duration", "120", "--slice-s", "1")


def start(sim, results: Path) -> subprocess.Popen:
    return subprocess.Popen(locust_cmd(sim.url, "--results-dir", str(results), *LONG), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_for_slices(results: Path, proc: subprocess.Popen, n: int, timeout_s: float = 45) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        try:
            run = resolve_run_dir(results)
        except Exception:
            run = None
        if run is not None and len(read_slice_rows(run / SLICES_CSV)) >= n:
            return run
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"fewer than {n} slices in {timeout_s} s: {proc.stderr.read()[-3000:]}")


def test_sigkill_keeps_every_closed_slice_and_report_build_says_the_run_did_not_finish(sim, tmp_path, capsys):
    proc = start(sim, tmp_path)
    try:
        run = wait_for_slices(tmp_path, proc, 3)
    finally:
        proc.kill()  # SIGKILL: nothing of ours runs after this
        proc.wait(10)
        err = proc.stderr.read()
    kept = read_slice_rows(run / SLICES_CSV)
    assert len(kept) >= 3 and [r["slice"] for r in kept] == list(range(len(kept)))
    assert all(r["stage"] == 0 and r["requests"] > 0 and r["output_tokens_per_s"] > 0 for r in kept)
    assert "slice 0: 1/120 s" in err  # the console's line per closed slice
    assert report_main(["build", str(run)]) == 0
    out = capsys.readouterr()
    assert "the run did not finish" in out.err and f"time slices: {len(kept)}" in out.out
    html = (run / "report.html").read_text()
    assert 'id="slices"' in html and "The run did not finish" in html
    table = html[html.index('id="slices"'):]
    assert table[:table.index("</table>")].count("<tr>") == len(kept) + 1  # head + one row per slice


def test_sighup_stops_a_soak_like_sigterm_with_its_slices_written(sim, tmp_path):
    proc = start(sim, tmp_path)
    try:
        run = wait_for_slices(tmp_path, proc, 2)
        proc.send_signal(signal.SIGHUP)
        code = proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert code == 130, proc.stderr.read()[-3000:]  # interrupted: EXIT_INTERRUPTED
    summary = json.loads((run / "summary.json").read_text())
    assert summary["run"]["stop_reason"] == "interrupted" and summary["run"]["ended_at"] is not None
    slices = summary["slices"]
    # the slice under way closes at the stop: the slices end where the stopped window ends. It is
    # partial unless the stop came within a tick of a slice's end (stats.slices.slice_tolerance:
    # then that slice takes the remainder, as a window closed a tick late does)
    assert len(slices) >= 2 and [x["start_s"] for x in slices] == [float(k) for k in range(len(slices))]
    assert all(x["duration_s"] == 1.0 and not x["partial"] for x in slices[:-1]), slices
    last = slices[-1]
    assert 0 < last["duration_s"] <= 1.0 + slice_tolerance(1.0) + 0.001  # rows round durations to ms
    assert last["partial"] is (last["duration_s"] < 1.0), last
    assert [r["slice"] for r in read_slice_rows(run / SLICES_CSV)] == [s["slice"] for s in slices]
