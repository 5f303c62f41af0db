"""Start the simulator as a subprocess (for `make demo`, benchmarks and tests).

The simulator is a separate program (`python -m loadgen.sim`); this only launches it, waits for
its ``SIM_LISTENING <url>`` line and stops it (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

READY_PREFIX = "SIM_LISTENING "


class SimProcess:
    def __init__(self, args: list[str], ready_timeout_s: float = 30.0, stderr=None):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "loadgen.sim", "--port", "0", *args],
            stdout=subprocess.PIPE, stderr=stderr, text=True, bufsize=1,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        deadline = time.monotonic() + ready_timeout_s
        self.url = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if line.startswith(READY_PREFIX):
                self.url = line[len(READY_PREFIX):].strip()
                break
        # Keep draining stdout so a chatty simulator never blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()
        if not self.url:
            self.stop()
            raise RuntimeError(f"simulator did not start (args {args}, exit code {self.proc.returncode})")

    def _drain(self) -> None:
        for _ in self.proc.stdout:
            pass

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextmanager
def running_sim(*args: str, stderr=None):
    sim = SimProcess(list(args), stderr=stderr)
    try:
        yield sim
    finally:
        sim.stop()
