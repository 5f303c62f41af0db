"""Run the real `locust --headless -f locustfile.py` in a subprocess, bounded in time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from loadgen.report.runs import resolve_run_dir

ROOT = Path(__file__).resolve().parent.parent


def run_dir(results_dir: Path) -> Path:
    """The newest run's folder under a ``--results-dir`` (each run writes into its own)."""
    found = resolve_run_dir(results_dir)
    assert (found / "summary.json").is_file(), f"no run folder with a summary.json under {results_dir}"
    return found


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


def locust_cmd(host: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "locust", "--headless", "-f", str(ROOT / "locustfile.py"),
            "--host", host, "--loglevel", "WARNING", *args]


def run_locust(host: str, results_dir: Path, *args: str, timeout_s: float = 180,
               env: dict | None = None) -> LocustRun:
    cmd = locust_cmd(host, "--results-dir", str(results_dir), *args)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s,
                          env={**os.environ, **(env or {})})
    return LocustRun(proc.returncode, proc.stdout, proc.stderr, Path(results_dir))
