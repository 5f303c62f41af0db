"""Run the real `locust --headless -f locustfile.py` in a subprocess, bounded in time; the short
smoke run (``SMOKE``) and the module-scoped simulator it runs against (``fixed_sim``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from loadgen.run_folder.folders import run_folders
from loadgen.sim.launch import running_sim

ROOT = Path(__file__).resolve().parents[2]

# A short run: the smoke scenario, 20 output tokens, 1 s warmup, 2 s windows; the test adds --stages.
SMOKE = ("--scenario", "config/smoke.yaml", "--output-tokens", "20", "--warmup", "1", "--stage-duration", "2")


@pytest.fixture(scope="module")
def fixed_sim():
    """One simulator per test module for SMOKE runs: fixed timing, TTFT 20 ms, ITL 5 ms (20 tokens:
    0.12 s a request; --output-tokens 400: 2 s). A module binds it under its own name
    (``sim = fixed_sim``), as tests.support.dockerhost's ``host``."""
    with running_sim("--preset", "fixed", "--ttft-ms", "20", "--itl-ms", "5") as sim:
        yield sim


def run_dir(results_dir: Path) -> Path:
    """The newest run's folder under a ``--results-dir`` (each run writes into its own), good or
    failed: the run a test just did (``latest`` names the newest run that measured a stage)."""
    runs = run_folders(Path(results_dir))
    assert runs, f"no run folder with a summary.json under {results_dir}"
    return runs[-1]


@dataclass
class LocustRun:
    code: int
    stdout: str
    stderr: str
    results_dir: Path  # the --results-dir given; the run's files are in run_dir(results_dir)

    @property
    def run_dir(self) -> Path:
        return run_dir(self.results_dir)

    @property
    def summary(self) -> dict:
        return json.loads((self.run_dir / "summary.json").read_text())


def locust_cmd(host: str, *args: str, plots: bool = False) -> list[str]:
    """The locust command line; without the PNG plots (``--no-plots``: matplotlib costs a second of
    CPU and wall at every run's end) unless ``plots``, for a test that reads them."""
    return [sys.executable, "-m", "locust", "--headless", "-f", str(ROOT / "locustfile.py"),
            "--host", host, "--loglevel", "WARNING", *(() if plots else ("--no-plots",)), *args]


def run_locust(host: str, results_dir: Path, *args: str, timeout_s: float = 180,
               env: dict | None = None, plots: bool = False) -> LocustRun:
    cmd = locust_cmd(host, "--results-dir", str(results_dir), *args, plots=plots)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s,
                          env={**os.environ, **(env or {})})
    return LocustRun(proc.returncode, proc.stdout, proc.stderr, Path(results_dir))
