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
from pathlib import Path

from tests.support.engine import EngineProcess, http, installed, required
from tests.support.runlocust import ROOT

ENV_BINARY = "LLM_LOADGEN_LLAMA_SERVER"
ENSURE_SCRIPT = ROOT / "scripts" / "ensure-llama-server.sh"


def llama_server_binary() -> tuple[str | None, str]:
    """(path, "") of a usable binary, or (None, why there is none and how to get one)."""
    return installed(ENV_BINARY, ENSURE_SCRIPT, "a llama-server binary")


def require_llama_server() -> str:
    return required(ENV_BINARY, ENSURE_SCRIPT, "a llama-server binary", "llama-server")


class LlamaServer(EngineProcess):
    """One ``llama-server`` process; use as a context manager (``with LlamaServer(...) as srv``)."""

    name = "llama-server"

    def __init__(self, binary: str, model: Path, alias: str = "tiny-llama", ctx_tokens: int = 1024,
                 slots: int = 1, ready_timeout_s: float = 60.0, extra_args: tuple[str, ...] = (),
                 threads: int = 1, launcher: tuple[str, ...] = ()):
        super().__init__(ready_timeout_s)
        self.alias = alias
        self.cmd = [*launcher, binary, "-m", str(model), "--alias", alias, "--host", "127.0.0.1",
                    "--port", str(self.port), "-c", str(ctx_tokens), "-np", str(slots), "-t", str(threads),
                    "--metrics", *extra_args]

    def tokenize(self, text: str) -> list[int]:
        status, body = http(f"{self.url}/tokenize", {"content": text})
        assert status == 200, body
        return json.loads(body)["tokens"]
