"""Done-when check against the simulator with hidden parameters: sweep it for real over HTTP,
calibrate on that run (and a short second run with longer prompts: two prompt lengths separate the
prefill speed from the client's own TTFT overhead), compare fitted with true parameters, then
predict a changed workload (longer prompts still) and run that for real too: predicted vs measured
output tok/s and TTFT p50 per stage.

    .venv/bin/python bench/validate_whatif.py      # ~5 min on 2 cores; prints two tables

The simulator runs in real time (time_scale 1) so the client's own overhead stays small next to
the engine's steps.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from loadgen.predict.__main__ import main as predict_main  # noqa: E402
from loadgen.predict.vsweep import StagePlan  # noqa: E402
from loadgen.predict.whatif import WhatIf, predict  # noqa: E402
from loadgen.sim.config import load  # noqa: E402
from loadgen.sim.launch import running_sim  # noqa: E402
from tests.runlocust import run_locust  # noqa: E402

HIDDEN = {"step_base_ms": 12.0, "step_per_seq_ms": 0.4, "step_per_prefill_token_us": 30.0, "spec_accept": "0.2,0.3,0.5"}
STAGES, OUT, WARMUP_S, WINDOW_S = "1,4,16,64", 100, 2, 10
BASE_IN, SECOND_IN, CHANGED_IN = 500, 1500, 2000


def sweep(url: str, results: Path, input_tokens: int, stages: str = STAGES) -> dict:
    run = run_locust(url, results, "--scenario", "config/smoke.yaml", "--input-tokens", str(input_tokens),
                     "--output-tokens", str(OUT), "--warmup", str(WARMUP_S), "--stage-duration", str(WINDOW_S),
                     "--stages", stages, timeout_s=600)
    assert run.code == 0, run.stderr[-2000:]
    return run


def main() -> int:
    args = [x for k, v in HIDDEN.items() for x in ("--" + k.replace("_", "-"), str(v))]
    tmp = Path(tempfile.mkdtemp(prefix="validate_whatif_"))
    with running_sim("--timing", "engine", "--flavor", "sglang", "--kv-tokens", "400000", "--block-size", "1",
                     "--max-model-len", "8192", "--time-scale", "1", *args) as sim:
        base = sweep(sim.url, tmp / "base", BASE_IN)
        second = sweep(sim.url, tmp / "second", SECOND_IN, "1,16")
        changed = sweep(sim.url, tmp / "changed", CHANGED_IN)
    preset = tmp / "fitted.yaml"
    predict_main(["calibrate", str(base.run_dir), str(second.run_dir), "-o", str(preset)])
    fitted = load(str(preset))
    print("\nparameter                 true     fitted   error")
    mean_true = sum((i + 1) * p for i, p in enumerate([0.2, 0.3, 0.5]))
    mean_fit = sum((i + 1) * p for i, p in enumerate(fitted.spec_accept))
    for key, truth, got in (("step_base_ms", 12.0, fitted.step_base_ms), ("step_per_seq_ms", 0.4, fitted.step_per_seq_ms),
                            ("step_per_prefill_token_us", 30.0, fitted.step_per_prefill_token_us),
                            ("mean accept length", mean_true, mean_fit)):
        print(f"{key:<25} {truth:>7.3f} {got:>9.3f} {(got - truth) / truth:>+7.1%}")
    compare(f"changed workload ({CHANGED_IN} in / {OUT} out)", fitted, changed.summary, CHANGED_IN, OUT)
    return 0


def compare(title: str, cfg, measured: dict, input_tokens: int, output_tokens: int) -> None:
    """Predict the measured run's stages with ``cfg`` and print predicted vs measured output tok/s
    and TTFT p50 per stage (also bench/validate_whatif_llamacpp.py's table)."""
    sc = measured["scenario"]["stages"]
    plan = StagePlan(sc["warmup_s"], sc["duration_s"], sc["turnover"], sc["max_warmup_s"], sc["max_window_s"])
    loads = tuple(s["concurrency"] for s in measured["stages"])
    pred = predict(cfg, WhatIf(input_tokens, output_tokens, loads, plan=plan))
    print(f"\n{title}: predicted vs measured")
    print("   C   out tok/s pred    meas     err   TTFT p50 pred    meas     err")
    for p, m in zip(pred["stages"], measured["stages"], strict=True):
        et = (p["output_tokens_per_s"] - m["output_tokens_per_s"]) / m["output_tokens_per_s"]
        ef = (p["ttft_p50_s"] - m["ttft_p50_s"]) / m["ttft_p50_s"]
        print(f"{m['concurrency']:>4} {p['output_tokens_per_s']:>15.1f} {m['output_tokens_per_s']:>7.1f} {et:>+7.1%} "
              f"{p['ttft_p50_s'] * 1e3:>12.1f}ms {m['ttft_p50_s'] * 1e3:>6.1f}ms {ef:>+7.1%}")


if __name__ == "__main__":
    raise SystemExit(main())
