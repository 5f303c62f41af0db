"""--repeat and the regression gate end to end: three repetitions of one short stage each against
the simulator at full speed and at half speed (--time-scale 0.5 scales every simulated time, so its
output tokens/s is 0.5x), then ``llm-loadgen report compare BASELINE CANDIDATE --fail-on`` both ways.

The two servers differ by a factor of two, far from the gate's 5 % threshold either way: a busy
machine only slows a run's client, by far less than that, so this file runs beside others and the
two repeat runs side by side. Whether three repetitions of a short stage resolve a 10 % change is a
property of the measurement, not of the wiring: the gate's decisions at 10 % and at no change are
tests/unit/report/test_gate.py's (seeded repetitions).
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from loadgen.errors import EXIT_OK, EXIT_REGRESSION
from loadgen.sim.launch import running_sim

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
# 100 tokens at 5 ms: ~0.52 s a request (1.04 s at half speed), 8 users, a 2 s window
SIM = ("--preset", "fixed", "--ttft-ms", "20", "--itl-ms", "5")
RUN = ("--scenario", "config/smoke.yaml", "--output-tokens", "100", "--warmup", "1", "--stage-duration", "2",
       "--stages", "8", "--loglevel", "WARNING", "--no-plots")
N = 3


def _repeat(tmp_path: Path, name: str, *sim_args: str) -> Path:
    with running_sim(*SIM, *sim_args) as sim:
        done = subprocess.run([sys.executable, "-m", "loadgen.cli", "--host", sim.url, *RUN, "--repeat", str(N),
                               "--seed", "7", "--results-dir", str(tmp_path / name)],
                              cwd=ROOT, capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, done.stderr[-3000:]
    (folder,) = (tmp_path / name).iterdir()
    assert "KV-bounded maximum" in done.stdout and "3 repetitions" in done.stdout
    return folder


def _compare(tmp_path: Path, base: Path, cand: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loadgen.cli", "report", "compare", str(base), str(cand),
                           "--fail-on", "output_tokens_per_s:-5%", "--out", str(tmp_path / "gate")],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_repeat_folders_and_the_gate_on_a_twice_slower_simulator(tmp_path):
    with ThreadPoolExecutor(2) as pool:  # each run waits on its own processes
        base_f = pool.submit(_repeat, tmp_path, "base")
        slow_f = pool.submit(_repeat, tmp_path, "slow", "--time-scale", "0.5")
        base, slow = base_f.result(), slow_f.result()
    repeat = json.loads((base / "repeat.json").read_text())
    reps = repeat["repetitions"]
    assert [(r["index"], r["prompt_seed"], r["exit_code"]) for r in reps] == [(1, 7, 0), (2, 8, 0), (3, 9, 0)]
    for r in reps:  # each repetition a run folder of its own, run with its own seed
        summary = json.loads((base / r["folder"] / "summary.json").read_text())
        assert summary["scenario"]["prompt"]["seed"] == r["prompt_seed"]
    (stage,) = repeat["stages"]
    tput = stage["metrics"]["output_tokens_per_s"]
    assert stage["load"] == 8 and len(tput["values"]) == N and tput["low"] <= tput["mid"] <= tput["high"]
    assert repeat["findings"]["kv_max"]["values"][0] is not None
    page = (base / "report.html").read_text()  # the repeat folder's own report, its intervals plotted
    assert 'alt="intervals"' in page and (base / "intervals.png").read_bytes().startswith(b"\x89PNG")
    assert all(r["folder"] in page for r in reps)

    regressed = _compare(tmp_path, base, slow)
    assert regressed.returncode == EXIT_REGRESSION, regressed.stdout + regressed.stderr
    assert "FAIL output_tokens_per_s:-5%" in regressed.stdout
    assert "worse" in regressed.stdout

    improved = _compare(tmp_path, slow, base)  # twice the throughput is no regression
    assert improved.returncode == EXIT_OK, improved.stdout + improved.stderr
    assert "no regression beyond a threshold" in improved.stdout
