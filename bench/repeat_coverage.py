"""Do the 95 % intervals of ``llm-loadgen --repeat N`` cover the true value 95 % of the time?

Known truth: the simulator's ``fixed`` model (every request on its own schedule, no queueing)
driven in open loop (``--rates``: Poisson arrivals, seeded). Completions in a window of W seconds
are the arrivals of a window of the same length shifted by the (fixed) service time, so their
count is Poisson with mean rate x W, and the tokens received in the window have mean
rate x output_tokens x W. The true values per stage are therefore

    achieved_rate_per_s = offered rate        output_tokens_per_s = offered rate x output tokens

whatever the seeds; each repetition's figures scatter around them (a window of 3 s at 20 req/s
holds ~60 arrivals: ~13 % noise). An experiment is one ``llm-loadgen --repeat N`` (repetition k of
experiment m with ``--seed 1000 m + k``: no two repetitions share a schedule); each of its stages
gives one interval per metric (``repeat.json``, Student t over the N repetitions). The figure is
the share of all intervals that hold the true value, per metric and in all, with its binomial
standard error. The target: at least 90 %.

Why open loop and not a concurrency sweep: in a closed loop the requests of a window are nearly
deterministic (fixed timing), so the repetitions barely differ and the interval is narrower than
the client's own small bias (a few ms per request): its coverage says nothing about the statistics.

    .venv/bin/python bench/repeat_coverage.py [--experiments 8] [--repetitions 5] [--rates 10,20,40]
                                              [--window 3] [--output-tokens 40]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loadgen.sim.launch import running_sim  # noqa: E402

SIM_ARGS = ("--preset", "fixed", "--ttft-ms", "20", "--itl-ms", "5", "--kv-tokens", "100000000",
            "--max-running", "100000")
TARGET = 0.90


def truths(rate: float, output_tokens: int) -> dict[str, float]:
    return {"achieved_rate_per_s": rate, "output_tokens_per_s": rate * output_tokens}


def experiment(url: str, m: int, args, out: Path) -> dict:
    """One ``--repeat N`` run; its repeat.json."""
    results = out / f"exp{m}"
    cmd = [sys.executable, "-m", "loadgen.cli", "--host", url, "--scenario", "config/smoke.yaml",
           "--rates", args.rates, "--output-tokens", str(args.output_tokens), "--warmup", "1",
           "--stage-duration", str(args.window), "--repeat", str(args.repetitions), "--seed", str(1000 * m),
           "--results-dir", str(results), "--loglevel", "ERROR", "--exporter-port", "0"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"experiment {m}: exit {done.returncode}\n{done.stderr[-2000:]}")
    (folder,) = results.iterdir()
    return json.loads((folder / "repeat.json").read_text())


def covered(repeat: dict, output_tokens: int) -> list[tuple[str, float, bool, float, float, float]]:
    """(metric, rate, covered, low, mean, high) for every stage interval of one experiment."""
    rows = []
    for stage in repeat["stages"]:
        for key, truth in truths(stage["load"], output_tokens).items():
            iv = stage["metrics"][key]
            rows.append((key, stage["load"], iv["low"] <= truth <= iv["high"], iv["low"], iv["mid"], iv["high"]))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiments", type=int, default=8)
    ap.add_argument("--repetitions", type=int, default=5)
    ap.add_argument("--rates", default="10,20,40")
    ap.add_argument("--window", type=float, default=3.0)
    ap.add_argument("--output-tokens", type=int, default=40)
    args = ap.parse_args(argv)
    rows = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="repeat_coverage_") as tmp, running_sim(*SIM_ARGS) as sim:
        for m in range(args.experiments):
            repeat = experiment(sim.url, m, args, Path(tmp))
            mine = covered(repeat, args.output_tokens)
            rows += mine
            print(f"experiment {m + 1}/{args.experiments} ({time.monotonic() - t0:.0f} s): " + ", ".join(
                f"{k.split('_')[0]}@{rate:g} {'in' if ok else 'OUT'} [{lo:.4g}, {hi:.4g}]"
                for k, rate, ok, lo, _, hi in mine), flush=True)
    print(f"\n{args.experiments} experiments x {args.repetitions} repetitions, rates {args.rates} req/s, "
          f"{args.window:g} s windows; truth: achieved req/s = offered, output tok/s = offered x "
          f"{args.output_tokens}")
    for key in ("achieved_rate_per_s", "output_tokens_per_s", None):
        hits = [ok for k, _, ok, *_ in rows if key is None or k == key]
        share = sum(hits) / len(hits)
        se = math.sqrt(share * (1 - share) / len(hits))
        print(f"  95 % intervals covering the truth, {key or 'all':<20} {sum(hits)}/{len(hits)} = {share:.1%}"
              f" (+- {se:.1%})")
    share = sum(ok for _, _, ok, *_ in rows) / len(rows)
    print(f"coverage {share:.1%}: {'meets' if share >= TARGET else 'MISSES'} the target of {TARGET:.0%}")
    return 0 if share >= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
