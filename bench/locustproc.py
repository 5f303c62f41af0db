"""Drive the real `locust --headless -f locustfile.py` for a benchmark and watch it from outside.

The benchmark is a separate process from the client it measures, so the client's own figures
(summary.json) can be checked against /proc (CPU, memory) and against its exporter (scrapes).
Progress markers are the lines the run prints on stderr (``stage K C=N: ramp``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from procstat import cpu_seconds, memory_mb, tree

ROOT = Path(__file__).resolve().parent.parent


class BenchLocust:
    """One locust run in the background; ``results_dir`` gets the run's folder (``latest``) and the logs."""

    def __init__(self, host: str, results_dir: Path, *args: str, processes: int = 0,
                 exporter_port: int = 0, env: dict | None = None, locustfile: str = "locustfile.py"):
        self.results_dir = Path(results_dir)
        self.results_dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "locust", "--headless", "-f", str(ROOT / locustfile), "--host", host,
               "--loglevel", "WARNING", "--results-dir", str(self.results_dir), *args]
        if processes:
            cmd += ["--processes", str(processes)]
        if exporter_port:
            cmd += ["--exporter-port", str(exporter_port)]
        self.exporter_url = f"http://127.0.0.1:{exporter_port}/metrics" if exporter_port else None
        self.stderr_path = self.results_dir / "locust.stderr"
        self._stderr = open(self.stderr_path, "w")  # noqa: SIM115 (closed in wait())
        self._stdout = open(self.results_dir / "locust.stdout", "w")  # noqa: SIM115
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self._stdout, stderr=self._stderr,
                                     env={**os.environ, **(env or {})})
        self.pid = self.proc.pid

    # -- markers -----------------------------------------------------------------------------------
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout_s: float) -> float:
        """Wait until stderr matches ``pattern``; return perf_counter() when it was seen."""
        deadline = time.perf_counter() + timeout_s
        rx = re.compile(pattern)
        while time.perf_counter() < deadline:
            if rx.search(self.stderr()):
                return time.perf_counter()
            if self.proc.poll() is not None:
                raise RuntimeError(f"locust exited ({self.proc.returncode}) before {pattern!r}:\n"
                                   f"{self.stderr()[-3000:]}")
            time.sleep(0.1)
        raise RuntimeError(f"no {pattern!r} on locust's stderr within {timeout_s} s:\n{self.stderr()[-3000:]}")

    # -- samples -----------------------------------------------------------------------------------
    def sample(self) -> dict:
        """CPU seconds summed over the locust process tree, and memory of each process."""
        pids = tree(self.pid)
        return {"t": time.perf_counter(), "cpu_s": sum(cpu_seconds(p) for p in pids),
                "mem": {p: memory_mb(p) for p in pids}, "pids": pids}

    def scrape(self, timeout_s: float = 10.0) -> tuple[str, float]:
        """GET the exporter's /metrics: (text, seconds the scrape took)."""
        t0 = time.perf_counter()
        with urllib.request.urlopen(self.exporter_url, timeout=timeout_s) as resp:
            text = resp.read().decode()
        return text, time.perf_counter() - t0

    # -- end ---------------------------------------------------------------------------------------
    def wait(self, timeout_s: float) -> int:
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(f"locust still running after {timeout_s} s; killed. stderr tail:\n"
                               f"{self.stderr()[-3000:]}") from None
        finally:
            self._stderr.close()
            self._stdout.close()
        return code

    def kill(self) -> None:
        """Kill the locust process tree (workers first), only the processes this run started."""
        for p in reversed(tree(self.pid)):
            try:
                os.kill(p, 9)
            except ProcessLookupError:
                pass
        self.proc.wait()

    @property
    def summary(self) -> dict:
        """summary.json of the run, in its own run folder (``latest``, loadgen/run_folder/folders.py)."""
        return json.loads((self.results_dir / "latest" / "summary.json").read_text())


class Sampler(threading.Thread):
    """Calls ``fn()`` every ``interval_s`` in the background; results in ``samples``."""

    def __init__(self, fn, interval_s: float):
        super().__init__(daemon=True)
        self.fn, self.interval_s = fn, interval_s
        self.samples: list = []
        self.errors: list[str] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self.interval_s):
            try:
                self.samples.append(self.fn())
            except Exception as exc:  # a sample failing (process gone) must not end the bench
                self.errors.append(repr(exc))

    def stop(self) -> list:
        self._halt.set()
        self.join(timeout=10)
        return self.samples
