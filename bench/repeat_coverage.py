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

Into ``--out`` (default ``results/repeat_coverage``) it writes each experiment's repeat folder
(``exp<m>/``, with its own report.html), and the bench's report (``loadgen.repeat.report_files``):
coverage.json (every interval, the coverage table, what was run), intervals.png (each interval as
a bar relative to the truth, covered green, missed red), coverage.png (the share per metric and in
all with its binomial standard error) and report.html. ``--report-only`` redraws them from
coverage.json.

Why open loop and not a concurrency sweep: in a closed loop the requests of a window are nearly
deterministic (fixed timing), so the repetitions barely differ and the interval is narrower than
the client's own small bias (a few ms per request): its coverage says nothing about the statistics.

    .venv/bin/python bench/repeat_coverage.py [--experiments 8] [--repetitions 5] [--rates 10,20,40]
                                              [--window 3] [--output-tokens 40] [--out DIR] [--report-only]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loadgen.repeat.report_files import COVERAGE_JSON, write_coverage_report  # noqa: E402
from loadgen.sim.launch import running_sim  # noqa: E402

SIM_ARGS = ("--preset", "fixed", "--ttft-ms", "20", "--itl-ms", "5", "--kv-tokens", "100000000",
            "--max-running", "100000")
TARGET = 0.90


def truths(rate: float, output_tokens: int) -> dict[str, float]:
    return {"achieved_rate_per_s": rate, "output_tokens_per_s": rate * output_tokens}


def experiment(url: str, m: int, args, out: Path) -> dict:
    """One ``--repeat N`` run; its repeat.json."""
    results = out / f"exp{m}"
    shutil.rmtree(results, ignore_errors=True)  # a previous bench's: one repeat folder per experiment
    cmd = [sys.executable, "-m", "loadgen.cli", "--host", url, "--scenario", "config/smoke.yaml",
           "--rates", args.rates, "--output-tokens", str(args.output_tokens), "--warmup", "1",
           "--stage-duration", str(args.window), "--repeat", str(args.repetitions), "--seed", str(1000 * m),
           "--results-dir", str(results), "--loglevel", "ERROR", "--exporter-port", "0"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"experiment {m}: exit {done.returncode}\n{done.stderr[-2000:]}")
    (folder,) = results.iterdir()
    return json.loads((folder / "repeat.json").read_text())


def covered(repeat: dict, output_tokens: int, m: int) -> list[dict]:
    """Every stage interval of experiment ``m``: {"experiment", "metric", "load", "truth", "low",
    "mid", "high", "covered"} (``loadgen.repeat.report_files``'s rows)."""
    rows = []
    for stage in repeat["stages"]:
        for key, truth in truths(stage["load"], output_tokens).items():
            iv = stage["metrics"][key]
            rows.append({"experiment": m, "metric": key, "load": stage["load"], "truth": truth, "low": iv["low"],
                         "mid": iv["mid"], "high": iv["high"], "covered": iv["low"] <= truth <= iv["high"]})
    return rows


def report(out: Path, rows: list[dict], about: dict) -> float:
    """Write the report into ``out``, print the coverage lines; the share over all intervals."""
    table = write_coverage_report(out, rows, about, TARGET, "req/s")
    print(f"\n{about['experiments']} experiments x {about['repetitions']} repetitions, rates {about['rates']} req/s, "
          f"{about['window_s']:g} s windows; truth: {about['truth']}")
    for t in table:
        print(f"  95 % intervals covering the truth, {t['metric']:<20} {t['covered']}/{t['n']} = {t['share']:.1%}"
              f" (+- {t['se']:.1%})")
    share = table[-1]["share"]
    print(f"coverage {share:.1%}: {'meets' if share >= TARGET else 'MISSES'} the target of {TARGET:.0%}")
    print(f"report: {out / 'report.html'} (intervals.png, coverage.png, coverage.json)")
    return share


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiments", type=int, default=8)
    ap.add_argument("--repetitions", type=int, default=5)
    ap.add_argument("--rates", default="10,20,40")
    ap.add_argument("--window", type=float, default=3.0)
    ap.add_argument("--output-tokens", type=int, default=40)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "repeat_coverage",
                    help="folder for the experiments and the report (default: %(default)s)")
    ap.add_argument("--report-only", action="store_true", help="redraw the report from --out's coverage.json")
    args = ap.parse_args(argv)
    if args.report_only:
        saved = json.loads((args.out / COVERAGE_JSON).read_text())
        return 0 if report(args.out, saved["intervals"], saved["about"]) >= TARGET else 1
    about = {"experiments": args.experiments, "repetitions": args.repetitions, "rates": args.rates,
             "window_s": args.window, "output_tokens": args.output_tokens,
             "simulator": "llm-loadgen sim " + " ".join(SIM_ARGS),
             "truth": f"achieved req/s = offered rate, output tok/s = offered rate x {args.output_tokens}",
             "seeds": "experiment m, repetition k: --seed 1000 m + k",
             "command": "bench/repeat_coverage.py " + " ".join(sys.argv[1:] if argv is None else argv)}
    rows = []
    t0 = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    with running_sim(*SIM_ARGS) as sim:
        for m in range(args.experiments):
            repeat = experiment(sim.url, m, args, args.out)
            mine = covered(repeat, args.output_tokens, m)
            rows += mine
            print(f"experiment {m + 1}/{args.experiments} ({time.monotonic() - t0:.0f} s): " + ", ".join(
                f"{r['metric'].split('_')[0]}@{r['load']:g} {'in' if r['covered'] else 'OUT'} "
                f"[{r['low']:.4g}, {r['high']:.4g}]" for r in mine), flush=True)
    about["wall_s"] = round(time.monotonic() - t0)
    return 0 if report(args.out, rows, about) >= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
