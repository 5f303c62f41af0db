"""Done-when check against the simulator with hidden parameters: sweep it for real over HTTP,
calibrate on that run (and a short second run with longer prompts: two prompt lengths separate the
prefill speed from the client's own TTFT overhead), compare fitted with true parameters, then
predict a changed workload (longer prompts still) and run that for real too: predicted vs measured
output tok/s and TTFT p50 per stage.

    .venv/bin/python bench/validate_whatif.py      # ~8 min on 2 cores; prints three tables

The changed workload runs twice: with the calibration's short stages (2 s warmup, 10 s windows),
and at C = 16, 64 in steady state (90 s warmup, 20 s windows). A stage's new users start together
and form a cohort whose prefills collide; it disperses over tens of request lifetimes (random
accept lengths), so a window opened a few seconds after the stage started catches a phase of that
transient, a draw. The prediction is therefore a distribution: ``SPREAD`` + 1 virtual runs (other
engine seeds, a 0-2 ms client jitter); the table gives their median, their range and where the
measured value falls among them (``rank k/n``: k runs predicted less). ``truth`` is that median
with the hidden parameters themselves (what is left between it and the measurement is not the
fit's); ``fit+acc`` with the fitted engine but the hidden accept-length distribution (stage rows
show only its mean, and its spread sets how fast a cohort disperses).

A third changed workload has the lengths a user's traffic really has: prompts lognormal (mean
2000, std 600, clamped 500..4000), outputs uniform 50..150, the default 5 s ramp (``MIXED``), at
C = 1, 4, 16, 64 with 10 s warmups and 20 s windows; its prediction is the run's own resolved
scenario (summary.json ``scenario``) through ``llm-loadgen whatif --scenario``'s path
(``loadgen.whatif.scenario.whatif_of``): the same distributions, seeds and ramp.

The simulator runs in real time (time_scale 1) so the client's own overhead stays small next to
the engine's steps.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from loadgen.config import StagesConfig, build_scenario  # noqa: E402
from loadgen.sim.config import load  # noqa: E402
from loadgen.sim.launch import running_sim  # noqa: E402
from loadgen.whatif.__main__ import main as predict_main  # noqa: E402
from loadgen.whatif.scenario import whatif_of  # noqa: E402
from loadgen.whatif.summary import WhatIf, predict  # noqa: E402
from loadgen.whatif.virtual_sweep import stage_rules  # noqa: E402
from tests.support.runlocust import run_locust  # noqa: E402

HIDDEN = {"step_base_ms": 12.0, "step_per_seq_ms": 0.4, "step_per_prefill_token_us": 30.0, "spec_accept": "0.2,0.3,0.5"}
SIM = ("--timing", "engine", "--flavor", "sglang", "--kv-tokens", "400000", "--block-size", "1", "--max-model-len", "8192",
       "--time-scale", "1")
STAGES, OUT, WARMUP_S, WINDOW_S = "1,4,16,64", 100, 2, 10
STEADY_STAGES, STEADY_WARMUP_S, STEADY_WINDOW_S = "16,64", 90, 20
BASE_IN, SECOND_IN, CHANGED_IN = 500, 1500, 2000
SPREAD = 15  # extra virtual runs: the prediction is the median of 16
MIXED = ("--input-dist", "lognormal", "--input-mean", "2000", "--input-std", "600", "--input-min", "500",
         "--input-max", "4000", "--output-dist", "uniform", "--output-min", "50", "--output-max", "150", "--ramp", "5")
MIXED_STAGES, MIXED_WARMUP_S, MIXED_WINDOW_S = "1,4,16,64", 10, 20


def sweep(url: str, results: Path, input_tokens: int, stages: str = STAGES, warmup_s: float = WARMUP_S,
          window_s: float = WINDOW_S, extra: tuple[str, ...] = ()):
    run = run_locust(url, results, "--scenario", "config/smoke.yaml", "--input-tokens", str(input_tokens),
                     "--output-tokens", str(OUT), "--warmup", str(warmup_s), "--stage-duration", str(window_s),
                     "--stages", stages, *extra, timeout_s=900)
    assert run.code == 0, run.stderr[-2000:]
    return run


def main() -> int:
    args = [x for k, v in HIDDEN.items() for x in ("--" + k.replace("_", "-"), str(v))]
    tmp = Path(tempfile.mkdtemp(prefix="validate_whatif_"))
    with running_sim(*SIM, *args) as sim:
        base = sweep(sim.url, tmp / "base", BASE_IN)
        second = sweep(sim.url, tmp / "second", SECOND_IN, "1,16")
        changed = sweep(sim.url, tmp / "changed", CHANGED_IN)
        steady = sweep(sim.url, tmp / "steady", CHANGED_IN, STEADY_STAGES, STEADY_WARMUP_S, STEADY_WINDOW_S)
        mixed = sweep(sim.url, tmp / "mixed", CHANGED_IN, MIXED_STAGES, MIXED_WARMUP_S, MIXED_WINDOW_S, MIXED)
    print(f"run folders under {tmp}")
    preset = tmp / "fitted.yaml"
    predict_main(["calibrate", str(base.run_dir), str(second.run_dir), "-o", str(preset)])
    fitted = load(str(preset))
    hidden = _truth()
    also = {"truth": hidden, "fit+acc": replace(fitted, spec_accept=hidden.spec_accept)}
    print("\nparameter                 true     fitted   error")
    mean_true = sum((i + 1) * p for i, p in enumerate([0.2, 0.3, 0.5]))
    mean_fit = sum((i + 1) * p for i, p in enumerate(fitted.spec_accept))
    for key, true, got in (("step_base_ms", 12.0, fitted.step_base_ms), ("step_per_seq_ms", 0.4, fitted.step_per_seq_ms),
                           ("step_per_prefill_token_us", 30.0, fitted.step_per_prefill_token_us),
                           ("mean accept length", mean_true, mean_fit)):
        print(f"{key:<25} {true:>7.3f} {got:>9.3f} {(got - true) / true:>+7.1%}")
    for title, run in ((f"changed workload ({CHANGED_IN} in / {OUT} out), {WARMUP_S} s warmup, {WINDOW_S} s windows",
                        changed),
                       (f"the same in steady state, {STEADY_WARMUP_S} s warmup, {STEADY_WINDOW_S} s windows", steady)):
        compare(title, fitted, run.summary, CHANGED_IN, OUT, spread=SPREAD, also=also)
    compare_mixed(fitted, mixed.summary, also)
    return 0


def compare_mixed(fitted, measured: dict, also: dict) -> None:
    """The mixed-length workload: predicted from the run's own resolved scenario."""
    w, _ = whatif_of(build_scenario(measured["scenario"]), spread=SPREAD)
    sc = measured["scenario"]
    title = (f"mixed lengths (input lognormal mean {sc['input']['mean']:g} std {sc['input']['std']:g}, "
             f"{sc['input']['min']}..{sc['input']['max']}; output uniform {sc['output']['min']}..{sc['output']['max']}; "
             f"ramp {sc['stages']['ramp_s']:g} s), {MIXED_WARMUP_S} s warmup, {MIXED_WINDOW_S} s windows")
    compare(title, fitted, measured, CHANGED_IN, OUT, spread=SPREAD, also=also, whatif=w)


def _truth():
    """The hidden simulator's own configuration (what the fit does not see)."""
    keys = dict(zip((k.lstrip("-").replace("-", "_") for k in SIM[::2]), SIM[1::2], strict=True))
    return load(None, {**keys, **HIDDEN})


def _plan(measured: dict) -> StagesConfig:
    sc = measured["scenario"]["stages"]
    return stage_rules(ramp_s=0, warmup_s=sc["warmup_s"], duration_s=sc["duration_s"], turnover=sc["turnover"],
                       max_warmup_s=sc["max_warmup_s"], max_window_s=sc["max_window_s"])


def compare(title: str, cfg, measured: dict, input_tokens: int, output_tokens: int, spread: int = 0,
            also: dict | None = None, whatif: WhatIf | None = None) -> None:
    """Predict the measured run's stages with ``cfg`` and print predicted vs measured output tok/s
    and TTFT p50 per stage (also bench/validate_whatif_llamacpp.py's table). With ``spread`` = K the
    prediction is the median of K + 1 virtual runs, with the runs' range and the measured value's
    rank among them; ``also`` ({name: SimConfig}) adds a column per entry: the TTFT p50 predicted
    (the same way) with that configuration. ``whatif``: the WhatIf to predict (default: fixed
    ``input_tokens`` / ``output_tokens`` at the measured stages)."""
    loads = tuple(s["concurrency"] for s in measured["stages"])
    w = whatif or WhatIf(input_tokens, output_tokens, loads, stages=_plan(measured), spread=spread)
    pred = predict(cfg, w)["stages"]
    other_rows = {name: predict(c, w)["stages"] for name, c in (also or {}).items()}
    print(f"\n{title}: predicted vs measured")
    head = "   C   out tok/s pred    meas     err   TTFT p50 pred    meas     err"
    if spread:
        head += f"   ({spread + 1} runs) range          rank" + "".join(f"  {n:>8}" for n in other_rows)
    print(head)
    for i, (p, m) in enumerate(zip(pred, measured["stages"], strict=True)):
        et = (p["output_tokens_per_s"] - m["output_tokens_per_s"]) / m["output_tokens_per_s"]
        ef = (p["ttft_p50_s"] - m["ttft_p50_s"]) / m["ttft_p50_s"]
        line = (f"{m['concurrency']:>4} {p['output_tokens_per_s']:>15.1f} {m['output_tokens_per_s']:>7.1f} {et:>+7.1%} "
                f"{p['ttft_p50_s'] * 1e3:>12.1f}ms {m['ttft_p50_s'] * 1e3:>6.1f}ms {ef:>+7.1%}")
        if spread:
            runs = p["spread_runs"]["ttft_p50_s"]
            below = sum(1 for v in runs if v < m["ttft_p50_s"])
            line += f"   {runs[0] * 1e3:>6.1f}-{runs[-1] * 1e3:<6.1f}ms  {below:>2}/{len(runs)}"
            line += "".join(f"  {rows[i]['ttft_p50_s'] * 1e3:>6.1f}ms" for rows in other_rows.values())
        print(line)
    if spread:
        print("  rank k/n: k of the n predicted runs gave a TTFT p50 below the measured one (0 or n: outside the range)")


if __name__ == "__main__":
    raise SystemExit(main())
