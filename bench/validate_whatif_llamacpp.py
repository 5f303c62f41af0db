"""Issue 29's llama.cpp check: calibrate on real llama-server sweeps, predict changed configurations,
run them for real, print predicted vs measured output tok/s and TTFT p50 per stage.

The calibration is a sweep at 128 prompt tokens (C = 1, 2, 4, 8) and a short one at the longest
prompt asked about (1024 tokens, C = 1, 4), as docs/whatif.md advises. The changed configurations:
longer prompts (768 tokens: 6x the sweep's, at no concurrency measured) and fewer slots (2 instead
of 4), each with 64 output tokens and with output lengths drawn uniformly from 32-96 as real outputs
vary; ``--only mid`` adds 256-token prompts. ``--only base,second512,beyond,beyond_dist`` measures
the extrapolation instead: calibrated at 128 and 512 tokens, prompts of 1024. Everything runs
``--passes`` times (default 2) on fresh servers, so the tables also show how far two measurements of
the same stage lie apart. Every run keeps its requests.jsonl, and each pass llama-server's log with
timestamps (bench/llamacpp_timeline.py joins them: how the server scheduled each request).

    nice -n -5 .venv/bin/python bench/validate_whatif_llamacpp.py --out /tmp/vl   # ~30 min, 2 passes
    .venv/bin/python bench/validate_whatif_llamacpp.py --tables-from /tmp/vl      # tables again, no runs

Measurement set-up (docs/whatif.md 'Against llama.cpp'):
- llama-server is pinned to CPU 0 (``taskset``) with one compute thread (``-t 1``: the one core it
  has); this process and the load generator it starts are pinned to CPU 1. Run it under
  ``nice -n -5`` on a machine shared with other work (the children inherit the priority).
- The model is the tests' random llama (tests/support/make_gguf.py) at 512 wide, 8 layers, f32: 96 MB of
  weights, more than the 32 MB L3, so a decode step streams them from memory and costs ~6 ms at
  batch 1 on the reference machine, several times a request's HTTP and client cost (the fit's
  client overhead: 0-4 ms).
- ``--cache-ram 0``: llama-server's RAM prompt cache saves a slot's KV and searches the cache in
  its main loop each time a slot takes a new request; the load generator's prompts are random, so
  it never hits, it only adds a per-request pause that grows with the cache.
- Windows of 30 s after 5 s warmup (the turnover rule extends them up to 90 s).

Calibration (``python -m loadgen.whatif calibrate BASE SECOND --max-batch SLOTS``) fits the step
time's straight line over the batches the predicted configuration runs (1 to its slots): on this
CPU the step time is 6, 13, 20 ms at batch 1, 2, 4, not one line. The preset prefills in
llama-server's 2048-token batch (the calibration does that for a llama.cpp run) and runs
``max_running`` = the slots (``-np``) of the configuration predicted. The server's own prompt times
at C=1 of the two lengths give the prompt's cost growing with its square (``step_per_prefill_pair_ns``).
Each changed run is predicted from its own scenario (stages, rules, output length distribution and
seed: ``loadgen.whatif.scenario.whatif_of``, as ``llm-loadgen whatif PRESET --scenario FILE``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from loadgen.config.build import build_scenario  # noqa: E402
from loadgen.sim.config import load  # noqa: E402
from loadgen.whatif.__main__ import main as predict_main  # noqa: E402
from loadgen.whatif.scenario import whatif_of  # noqa: E402
from loadgen.whatif.summary import predict  # noqa: E402
from tests.support.llamacpp import LlamaServer, llama_server_binary  # noqa: E402
from tests.support.make_gguf import write_tiny_llama  # noqa: E402
from tests.support.runlocust import run_dir, run_locust  # noqa: E402

OUT, CTX = 64, 16384
WARMUP_S, WINDOW_S, MAX_WINDOW_S = 5, 30, 90
SERVER_CPU, CLIENT_CPU = 0, 1
# name: (slots, input tokens, stages, output lengths). base + a calibration run calibrate; the others
# are predicted. Output lengths: OUT fixed, or drawn uniformly from [OUT_MIN, OUT_MAX] (mean OUT) per
# request, as real outputs vary: users then do not finish in lockstep (docs/whatif.md 'Against llama.cpp').
OUT_MIN, OUT_MAX = 32, 96
FIXED, UNIFORM = "fixed", "uniform"
RUNS = {
    "base": (4, 128, "1,2,4,8", FIXED),
    "second": (4, 1024, "1,4", FIXED),  # the calibration's second prompt length: the longest asked about
    "longer": (4, 768, "1,2,4,8", FIXED),
    "fewer": (2, 128, "1,2,4,8", FIXED),
    "longer_dist": (4, 768, "1,2,4,8", UNIFORM),
    "fewer_dist": (2, 128, "1,2,4,8", UNIFORM),
    "mid": (4, 256, "1,2,4,8", FIXED),
    # extrapolation: calibrated on 128 + 512, prompts of 1024 (--only base,second512,beyond,beyond_dist)
    "second512": (4, 512, "1,4", FIXED),
    "beyond": (4, 1024, "1,2,4,8", FIXED),
    "beyond_dist": (4, 1024, "1,2,4,8", UNIFORM),
}
DEFAULT_RUNS = ("base", "second", "longer", "fewer", "longer_dist", "fewer_dist")
SPREAD = 8  # predicted with 8 more seeds and a 0-2 ms client jitter: the range a cohort's phase spans
# changed run: (title, the calibration's second run; the first is base)
CHANGED = {"longer": ("longer prompts (768 in, 4 slots; calibrated at 128 and 1024)", "second"),
           "longer_dist": (f"longer prompts, output lengths uniform {OUT_MIN}-{OUT_MAX} (768 in, 4 slots)", "second"),
           "fewer": ("fewer slots (128 in, 2 slots)", "second"),
           "fewer_dist": (f"fewer slots, output lengths uniform {OUT_MIN}-{OUT_MAX} (128 in, 2 slots)", "second"),
           "mid": ("prompts of 256 (4 slots)", "second"),
           "beyond": ("prompts beyond the calibrated lengths (1024 in, 4 slots; calibrated at 128 and 512)",
                      "second512"),
           "beyond_dist": (f"beyond the calibrated lengths, output lengths uniform {OUT_MIN}-{OUT_MAX} "
                           "(1024 in, 4 slots; calibrated at 128 and 512)", "second512")}


def sweep(url: str, results: Path, input_tokens: int, stages: str, output: str) -> None:
    lengths = ("--output-dist", UNIFORM, "--output-min", str(OUT_MIN), "--output-max", str(OUT_MAX)) \
        if output == UNIFORM else ()
    run = run_locust(url, results, "--scenario", "config/smoke.yaml", "--input-tokens", str(input_tokens),
                     "--output-tokens", str(OUT), *lengths, "--warmup", str(WARMUP_S), "--stage-duration", str(WINDOW_S),
                     "--set", f"stages.max_window_s={MAX_WINDOW_S}", "--stages", stages, "--requests-jsonl",
                     timeout_s=1800)
    assert run.code in (0, 3), run.stderr[-3000:]  # 3: the KV guard stopped before a stage


def measure(out: Path, passes: int, only: set[str]) -> None:
    binary, why = llama_server_binary()
    if binary is None:
        raise SystemExit(f"validate_whatif_llamacpp: {why}")
    if len(os.sched_getaffinity(0)) >= 2:
        os.sched_setaffinity(0, {CLIENT_CPU})
        launcher = ("taskset", "-c", str(SERVER_CPU))
    else:
        launcher = ()
    print(f"validate_whatif_llamacpp: nice {os.nice(0)}, server on CPU {SERVER_CPU}, client on CPU {CLIENT_CPU}",
          flush=True)
    model = write_tiny_llama(out / "wide.gguf", vocab_size=8192, n_ctx_train=CTX, n_embd=512, n_layer=8,
                             n_head=8, n_ff=1024)
    for k in range(passes):
        todo = {name: run for name, run in RUNS.items() if name in only}
        for slots in sorted({run[0] for run in todo.values()}, reverse=True):
            # the server's log with timestamps (its per-request prompt and decode timings) beside the runs
            log = out / f"pass{k + 1}" / f"llama-server-{slots}slots.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            with LlamaServer(binary, model.path, ctx_tokens=CTX, slots=slots, launcher=launcher,
                             extra_args=("--cache-ram", "0", "--log-file", str(log), "--log-timestamps",
                                         "--log-prefix")) as srv:
                for name, (s, n_in, stages, output) in todo.items():
                    if s == slots:
                        print(f"pass {k + 1}: {name} ({n_in} in, {output} out, {slots} slots, C={stages})", flush=True)
                        sweep(srv.url, out / f"pass{k + 1}" / name, n_in, stages, output)


def summary(out: Path, k: int, name: str) -> tuple[Path, dict]:
    folder = run_dir(out / f"pass{k}" / name)
    return folder, json.loads((folder / "summary.json").read_text())


def tables(out: Path) -> None:
    """Per changed configuration, one table: each pass's stages predicted (from that pass's
    calibration) vs measured; the passes' rows one under the other show how far two measurements
    of the same stage lie apart."""
    passes = sorted(int(p.name[4:]) for p in out.glob("pass*") if p.is_dir())
    presets: dict[tuple[int, int, str], object] = {}
    for name, (title, second) in CHANGED.items():
        done = [k for k in passes if (out / f"pass{k}" / name).is_dir() and (out / f"pass{k}" / second).is_dir()]
        if not done:
            print(f"\n(no {name} run with its calibration in {out}; measure it with --only base,{second},{name})")
            continue
        slots = RUNS[name][0]
        lengths = [summary(out, done[0], run)[1]["scenario"]["input_tokens"] for run in ("base", second)]
        print(f"\n{title}: predicted vs measured (calibrated on base ({lengths[0]} in) + {second} "
              f"({lengths[1]} in) of the same pass, batches up to {slots})")
        print("| C | pass | out tok/s predicted (range) | measured | error | TTFT p50 predicted (range) | measured | error |")
        print("|---|---|---|---|---|---|---|---|")
        for k in done:
            if (k, slots, second) not in presets:
                runs = [str(summary(out, k, "base")[0]), str(summary(out, k, second)[0])]
                preset = out / f"pass{k}" / f"llamacpp-{slots}slots-{second}.yaml"
                # the step time's straight line fitted over the batches this configuration runs (1..slots)
                with contextlib.redirect_stdout(sys.stderr):  # its report, not inside the table's rows
                    predict_main(["calibrate", *runs, "-o", str(preset), "--max-batch", str(slots)])
                presets[k, slots, second] = load(str(preset), {"max_running": slots})
            compare(k, presets[k, slots, second], summary(out, k, name)[1])


def compare(k: int, cfg, measured: dict) -> None:
    """Predict the measured run's stages with ``cfg``; print predicted vs measured output tok/s and
    TTFT p50 per stage, error = (predicted - measured) / measured, and the predicted range over
    ``SPREAD`` more virtual runs (``loadgen.whatif.summary`` spread)."""
    # the measured run's own scenario (stages, rules, output length distribution and seed), as
    # `llm-loadgen whatif PRESET --scenario FILE` predicts it
    w, _ = whatif_of(build_scenario(measured["scenario"]), spread=SPREAD)
    pred = predict(cfg, w)
    for p, m in zip(pred["stages"], measured["stages"], strict=True):
        et = (p["output_tokens_per_s"] - m["output_tokens_per_s"]) / m["output_tokens_per_s"]
        ef = (p["ttft_p50_s"] - m["ttft_p50_s"]) / m["ttft_p50_s"]
        lo_t, hi_t = p["spread"]["output_tokens_per_s"]
        lo_f, hi_f = p["spread"]["ttft_p50_s"]
        print(f"| {m['concurrency']} | {k} | {p['output_tokens_per_s']:.1f} ({lo_t:.0f}-{hi_t:.0f}) "
              f"| {m['output_tokens_per_s']:.1f} | {et:+.1%} "
              f"| {p['ttft_p50_s'] * 1e3:.0f} ms ({lo_f * 1e3:.0f}-{hi_f * 1e3:.0f}) | {m['ttft_p50_s'] * 1e3:.0f} ms "
              f"| {ef:+.1%} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="folder for the model, the run folders and the presets "
                    "(default: a new temporary folder)")
    ap.add_argument("--passes", type=int, default=2, help="measure everything this many times (default 2)")
    ap.add_argument("--tables-from", type=Path, help="print the tables of an earlier --out folder, run nothing")
    ap.add_argument("--only", default=",".join(DEFAULT_RUNS), help="measure only these runs into --out "
                    f"(comma-separated, of {', '.join(RUNS)}; default: {', '.join(DEFAULT_RUNS)})")
    args = ap.parse_args(argv)
    if args.tables_from:
        tables(args.tables_from)
        return 0
    out = args.out or Path(tempfile.mkdtemp(prefix="validate_llamacpp_"))
    out.mkdir(parents=True, exist_ok=True)
    unknown = set(args.only.split(",")) - set(RUNS)
    if unknown:
        ap.error(f"--only: unknown run(s) {', '.join(sorted(unknown))}; known: {', '.join(RUNS)}")
    measure(out, args.passes, set(args.only.split(",")))
    tables(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
