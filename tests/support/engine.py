"""A real inference engine's server process on 127.0.0.1, for the conformance tests.

``EngineProcess`` starts a command on a free port, waits until ``GET /health`` answers 200 (or the
process exits, or ``ready_timeout_s`` passes: the error carries the log's tail), and always stops
it on exit, also when the body of the ``with`` raises. ``http`` talks to it without environment
proxies. ``tests.support.llamacpp.LlamaServer`` and ``tests.support.vllm_server.VllmServer`` say which
command to run.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from loadgen.server.replies import parse_metrics
from tests.support.ports import free_port
from tests.support.procs import stop_process


def installed(env_var: str, ensure_script: Path, what: str, args: tuple[str, ...] = ()) -> tuple[str | None, str]:
    """(path, "") of the engine's executable: the one ``env_var`` names, else what ``ensure_script
    [args] --find`` prints (its cached install); or (None, why there is none and how to get one)."""
    named = os.environ.get(env_var)
    if named:
        if os.access(named, os.X_OK):
            return named, ""
        return None, f"{env_var}={named} is not an executable file"
    found = subprocess.run(["bash", str(ensure_script), *args, "--find"], capture_output=True, text=True, timeout=30)
    if found.returncode == 0 and found.stdout.strip():
        return found.stdout.strip().splitlines()[-1], ""
    return None, (found.stderr.strip() or f"{what} is not installed") + f" (or set {env_var} to {what})"


def required(env_var: str, ensure_script: Path, what: str, short: str, args: tuple[str, ...] = ()) -> str:
    """``installed(...)``'s path, or skip the calling test saying why there is none and how to get
    one (``short`` names the engine in the skip reason)."""
    path, why = installed(env_var, ensure_script, what, args)
    if path is None:
        pytest.skip(f"no {short}: {why}")
    return path


def http(url: str, body: dict | None = None, timeout_s: float = 30) -> tuple[int, str]:
    """GET ``url``, or POST ``body`` as JSON; (HTTP status, response body) whatever the status.
    Connection errors raise OSError. Environment proxies are ignored: the server is local."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout_s) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


class EngineProcess:
    """One server process; a subclass sets ``name`` and builds ``cmd`` (and ``env``) from ``port``."""

    name = "server"

    def __init__(self, ready_timeout_s: float = 60.0):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd: list[str] = []
        self.env: dict[str, str] | None = None
        self.ready_timeout_s = ready_timeout_s
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        self._proc: subprocess.Popen | None = None

    def __enter__(self):
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        """Start the process without waiting (``wait_ready`` waits): several can start at once."""
        self._proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=self._log,
                                      stderr=subprocess.STDOUT, env=self.env)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self._proc.returncode} before it was "
                                   f"ready ({' '.join(self.cmd)}):\n{self.log_tail()}")
            try:
                if http(f"{self.url}/health", timeout_s=1)[0] == 200:
                    return
            except OSError:  # not listening yet
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} not healthy after {self.ready_timeout_s} s on {self.url}:\n"
                           f"{self.log_tail()}")

    def log_tail(self, n_bytes: int = 3000) -> str:
        self._log.flush()
        self._log.seek(0, os.SEEK_END)
        size = self._log.tell()
        self._log.seek(max(0, size - n_bytes))
        return self._log.read().decode("utf-8", "replace")

    def get_json(self, path: str) -> dict:
        status, body = http(f"{self.url}{path}", timeout_s=5)
        assert status == 200, f"GET {path}: HTTP {status}: {body[:300]}"
        return json.loads(body)

    def metrics(self) -> dict[str, list]:
        status, body = http(f"{self.url}/metrics", timeout_s=5)
        assert status == 200, f"GET /metrics: HTTP {status}"
        return parse_metrics(body)

    def metric(self, name: str, **labels: str) -> float:
        """One counter or gauge of /metrics summed over its series (those with ``labels``)."""
        series = [(lb, v) for lb, v in self.metrics().get(name, []) if all(lb.get(k) == x for k, x in labels.items())]
        assert series, f"{name} {labels or ''} not in {self.name}'s /metrics"
        return sum(value for _, value in series)

    def stop(self) -> None:
        stop_process(self._proc)
        self._proc = None
        if not self._log.closed:
            self._log.close()
