"""Test helpers: a real llama.cpp ``llama-server`` on 127.0.0.1 serving a tiny GGUF model.

The binary is built once per machine by ``scripts/ensure-llama-server.sh`` (``make test`` runs it
through ``make system-tools``) and cached outside the clone; ``LLM_LOADGEN_LLAMA_SERVER`` names
another binary. ``require_llama_server()`` skips the calling test, saying how to build it, when
there is none.

``LlamaServer`` starts ``llama-server -m MODEL --alias NAME --host 127.0.0.1 --port P -c CTX -np
SLOTS -t THREADS --metrics`` (THREADS 1 unless told) on a free port, prefixed by ``launcher`` (e.g.
``("taskset", "-c", "0")`` to pin it to a core), waits until ``/health`` answers 200 and always kills it on
exit, also when the body of the ``with`` raises. ``-c`` is split across the slots: each request
gets CTX / SLOTS tokens of context; requests beyond SLOTS wait in the server's queue.
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

from loadgen.server.answers import parse_metrics
from tests.procs import stop_process
from tests.promtools import free_port
from tests.runlocust import ROOT

ENV_BINARY = "LLM_LOADGEN_LLAMA_SERVER"
ENSURE_SCRIPT = ROOT / "scripts" / "ensure-llama-server.sh"


def llama_server_binary() -> tuple[str | None, str]:
    """(path, "") of a usable binary, or (None, why there is none and how to get one)."""
    named = os.environ.get(ENV_BINARY)
    if named:
        if os.access(named, os.X_OK):
            return named, ""
        return None, f"{ENV_BINARY}={named} is not an executable file"
    found = subprocess.run(["bash", str(ENSURE_SCRIPT), "--find"], capture_output=True, text=True,
                           timeout=30)
    if found.returncode == 0 and found.stdout.strip():
        return found.stdout.strip().splitlines()[-1], ""
    return None, (found.stderr.strip() or "llama-server is not built") + \
        f" (or set {ENV_BINARY} to a llama-server binary)"


def require_llama_server() -> str:
    path, why = llama_server_binary()
    if path is None:
        pytest.skip(f"no llama-server: {why}")
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


class LlamaServer:
    """One ``llama-server`` process; use as a context manager (``with LlamaServer(...) as srv``)."""

    def __init__(self, binary: str, model: Path, alias: str = "tiny-llama", ctx_tokens: int = 1024,
                 slots: int = 1, ready_timeout_s: float = 60.0, extra_args: tuple[str, ...] = (),
                 threads: int = 1, launcher: tuple[str, ...] = ()):
        self.alias = alias
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [*launcher, binary, "-m", str(model), "--alias", alias, "--host", "127.0.0.1",
                    "--port", str(self.port), "-c", str(ctx_tokens), "-np", str(slots), "-t", str(threads),
                    "--metrics", *extra_args]
        self.ready_timeout_s = ready_timeout_s
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> LlamaServer:
        self._proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=self._log,
                                      stderr=subprocess.STDOUT)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self._proc.returncode} before it was "
                                   f"ready ({' '.join(self.cmd)}):\n{self.log_tail()}")
            try:
                if http(f"{self.url}/health", timeout_s=1)[0] == 200:
                    return
            except OSError:  # not listening yet
                pass
            time.sleep(0.1)
        raise RuntimeError(f"llama-server not healthy after {self.ready_timeout_s} s on {self.url}:\n"
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

    def metric(self, name: str) -> float:
        """One series of the server's /metrics, e.g. ``llamacpp:tokens_predicted_total``."""
        status, body = http(f"{self.url}/metrics", timeout_s=5)
        assert status == 200, f"GET /metrics: HTTP {status} (is --metrics on?)"
        series = parse_metrics(body).get(name)
        assert series, f"{name} not in llama-server's /metrics"
        return sum(value for _, value in series)

    def tokenize(self, text: str) -> list[int]:
        status, body = http(f"{self.url}/tokenize", {"content": text})
        assert status == 200, body
        return json.loads(body)["tokens"]

    def stop(self) -> None:
        stop_process(self._proc)
        self._proc = None
        if not self._log.closed:
            self._log.close()
