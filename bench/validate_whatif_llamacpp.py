"""Issue 29's llama.cpp check: calibrate on a real llama-server sweep, predict two changed
configurations (longer prompts; fewer slots), run them for real, print predicted vs measured.

    .venv/bin/python bench/validate_whatif_llamacpp.py     # needs make llama-server; ~10 min

The model is the tests' random llama (tests/make_gguf.py), made wide enough (512 wide, 8 layers)
that a step's compute, not the HTTP path, sets its time; llama-server runs one thread.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.validate_whatif import compare  # noqa: E402
from loadgen.predict.__main__ import main as predict_main  # noqa: E402
from loadgen.sim.config import load  # noqa: E402
from tests.llamacpp import LlamaServer, llama_server_binary  # noqa: E402
from tests.make_gguf import write_tiny_llama  # noqa: E402
from tests.runlocust import run_locust  # noqa: E402

OUT, CTX, STAGES = 64, 16384, "1,2,4,8"
WARMUP_S, WINDOW_S = 2, 8


def sweep(url: str, results: Path, input_tokens: int, stages: str = STAGES):
    run = run_locust(url, results, "--scenario", "config/smoke.yaml", "--input-tokens", str(input_tokens),
                     "--output-tokens", str(OUT), "--warmup", str(WARMUP_S), "--stage-duration", str(WINDOW_S),
                     "--stages", stages, timeout_s=900)
    assert run.code in (0, 3), run.stderr[-3000:]  # 3: the KV guard stopped before a stage
    return run


def main() -> int:
    binary, why = llama_server_binary()
    if binary is None:
        print(f"validate_whatif_llamacpp: {why}")
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="validate_llamacpp_"))
    model = write_tiny_llama(tmp / "wide.gguf", vocab_size=8192, n_ctx_train=CTX, n_embd=512, n_layer=8,
                             n_head=8, n_ff=1024)
    with LlamaServer(binary, model.path, ctx_tokens=CTX, slots=4) as srv:
        base = sweep(srv.url, tmp / "base", 128)
        second = sweep(srv.url, tmp / "second", 512, "1,4")
        longer = sweep(srv.url, tmp / "longer", 1024)
    with LlamaServer(binary, model.path, ctx_tokens=CTX, slots=2) as srv:
        fewer = sweep(srv.url, tmp / "fewer", 128)
    preset = tmp / "llamacpp.yaml"
    predict_main(["calibrate", str(base.run_dir), str(second.run_dir), "-o", str(preset)])
    compare("longer prompts (1024 in, 4 slots)", load(str(preset)), longer.summary, 1024, OUT)
    compare("fewer slots (128 in, 2 slots)", load(str(preset), {"max_running": 2}), fewer.summary, 128, OUT)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
