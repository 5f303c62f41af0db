"""Many workers: 8 x 128 users (1,024 streams) and 16 x 640 (10,240 streams) on one master.

    .venv/bin/python bench/many_workers.py [--runs 8x128,16x640] [--what-if auto|never|always] [--drain-s S]

Each run: one simulator (``fixed``: TTFT 500 ms, then 1 token a second; 8-token requests live
7.5 s, so 10,240 streams are ~10,900 chunks/s and ~1,370 requests/s), one master on 127.0.0.1 at
a free port (``--master-bind-port``: never Locust's default, so concurrent runs cannot collide)
and N separately started ``--worker`` processes, with a two-stage sweep (C/2, C), a 2 s ramp.
Checked (FAIL lines otherwise; exit 1):

- the run completed (exit 0) and no worker missed its heartbeats;
- every stage's users equal its concurrency, exactly;
- the master's totals equal the sum of the worker ledgers (``<results-dir>/workers/*.json``):
  requests, errors, tokens, requests cut at the stop (``cancelled_requests``) and every histogram's
  count -- every worker's final report merged (loadgen/fleet/final_reports.py);
- tokens the simulator generated (its ``generation_tokens_total``) = tokens the master received
  (with a drain cut short, ``--drain-s``: up to one more per request the stop cut, its last token
  still on the wire).

Figures:

- per stage: TTFT / ITL p50 and p99 against the configured 500 / 1000 ms, the busiest worker's
  CPU and loop lag; the simulator's own TTFT / chunk-gap means and overruns, every process's CPU;
- the master's cost per worker report = master CPU seconds (``/proc/<pid>/stat`` utime + stime,
  from the first stage's ramp to its exit) / reports merged (bench/master_probe.py counts Locust's
  ``worker_report`` events), and the thread CPU of the report listeners alone (Locust's + loadgen's)
  and of loadgen's merge alone. The first includes the master's fixed costs (heartbeats, shape ticks,
  the server watch), which dominate; the listeners are what each report adds: N workers report
  every 3 s, so they cost N / 3 × listener CPU a second (printed for N = 100);
- a reference: a raw client (bench/refclient.py, no Locust) holding the largest stream count on a
  fresh simulator, which shows how late one simulator on this machine is without loadgen.

What-if (``auto``: only when a run lost workers): the same run with the workers' option defaults
memoized (``LLM_BENCH_MEMO_OPTIONS=1``, bench/master_probe.py), the fix for Locust 2.47's
per-spawn-message parser rebuilds (tests/integration/test_multihost.py). About 4-6 minutes in all.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from locustproc import ROOT, BenchLocust, Sampler  # noqa: E402
from procstat import cpu_seconds  # noqa: E402

from loadgen.sim.launch import running_sim  # noqa: E402
from loadgen.stats.stage_stats import StageStats  # noqa: E402
from tests.support.merge_check import from_workers, ledger_totals  # noqa: E402

TTFT_MS, ITL_MS, OUTPUT_TOKENS = 500.0, 1000.0, 8
SIM = ("--preset", "fixed", "--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS), "--kv-tokens", "100000000")
REPORT_INTERVAL_S = 3.0  # Locust's WORKER_REPORT_INTERVAL
# A short ramp: Locust sends every worker a spawn message per dispatch iteration (~1 a second) and
# a Locust 2.47 worker blocks its loop ~0.1-0.3 CPU-s on each (tests/integration/test_multihost.py, the xfail
# on rebuilding the option parser); with a 10 s ramp 8 workers here all missed their heartbeats.
RAMP_S = 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def raise_fd_limit(need: int) -> None:
    """Every stream is a socket in a worker and in the simulator: lift the soft limit if we may."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < need:
        raise SystemExit(f"many_workers: {need} open files needed, the limit is {hard}; raise `ulimit -n`")


def sim_counters(url: str) -> dict[str, float]:
    """The simulator's own counters: generated tokens, timer passes and overruns, and the sum and
    count of its TTFT and ITL histograms (arrival of a request -> its first chunk; chunk gaps)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    want = {"vllm:generation_tokens_total": "generation_tokens", "llmsim_steps_total": "steps",
            "llmsim_step_overruns_total": "overruns",
            "vllm:time_to_first_token_seconds_sum": "ttft_sum", "vllm:time_to_first_token_seconds_count": "ttft_n",
            "vllm:inter_token_latency_seconds_sum": "itl_sum", "vllm:inter_token_latency_seconds_count": "itl_n"}
    out = dict.fromkeys(want.values(), 0.0)
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            if sample.name in want:
                out[want[sample.name]] += sample.value
    return out


def ledger_sum(results: Path) -> tuple[int, StageStats]:
    total, n = StageStats(), 0
    for p in (results / "workers").glob("*.json"):
        total.merge(StageStats.from_message(json.loads(p.read_text())["totals"]))
        n += 1
    return n, total


def merge_problems(summary: dict, n_ledgers: int, workers: int, total: StageStats) -> list[str]:
    """What differs between the master's totals (less its own start probes) and the sum of the
    worker ledgers; the same comparison as the multi-host tests', and the requests cut at the stop."""
    got = {**from_workers(summary), "ledgers": n_ledgers,
           "cancelled_requests": summary["totals"].get("cancelled_requests", 0)}
    want = {**ledger_totals(total), "ledgers": workers, "cancelled_requests": total.cancelled_requests}
    return [f"{k}: master {got.get(k)} != ledgers {v}" for k, v in want.items() if got.get(k) != v]


def final_reports_s(stderr: str) -> str | None:
    """How long the stop waited for the workers' final reports (the master's INFO line)."""
    m = re.search(r"final reports from \d+ workers in ([\d.]+) s", stderr)
    return m.group(1) if m else None


def run(workers: int, users_per_worker: int, workdir: Path, memo_options: bool = False, drain_s: float = 60) -> dict:
    peak = workers * users_per_worker
    stages = [peak // 2, peak]
    raise_fd_limit(peak + 4096)
    out = workdir / f"{workers}x{users_per_worker}{'-memo' if memo_options else ''}"
    env = {"LLM_BENCH_MEMO_OPTIONS": "1"} if memo_options else {}
    port = free_port()
    with running_sim(*SIM) as sim:
        before = sim_counters(sim.url)
        master = BenchLocust(
            sim.url, out, "--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
            "--expect-workers", str(workers), "--scenario", "config/smoke.yaml", "--input-tokens", "64",
            "--output-tokens", str(OUTPUT_TOKENS), "--stages", ",".join(map(str, stages)), "--ramp", str(RAMP_S),
            "--warmup", "2", "--stage-duration", "8", "--set", "stages.max_warmup_s=30", "--set", f"stages.drain_s={drain_s:g}",
            "--loglevel", "INFO", locustfile="bench/master_probe.py")
        logs = [open(out / f"worker{i}.stderr", "w") for i in range(workers)]  # noqa: SIM115
        procs = [subprocess.Popen(
            [sys.executable, "-m", "locust", "--headless", "-f", str(ROOT / "bench/master_probe.py"), "--worker",
             "--master-host", "127.0.0.1", "--master-port", str(port), "--loglevel", "WARNING"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log, env={**os.environ, **env}) for log in logs]
        pids = [master.pid, sim.proc.pid, *(p.pid for p in procs)]
        sampler = Sampler(lambda: (time.perf_counter(), [cpu_seconds(pid) for pid in pids]), 0.2)
        sampler.start()
        try:
            t_start = master.wait_for(r"stage 0 C=\d+: ramp", timeout_s=180)
            code = master.wait(600)
        finally:
            for p in procs:
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
            for log in logs:
                log.close()
            samples = sampler.stop()
        after = sim_counters(sim.url)
    run_s = samples[-1][0] - t_start
    # CPU time only grows; a sample taken after a process exited reads 0: take each one's maximum
    cpu_at_start = next((cpus for t, cpus in reversed(samples) if t <= t_start), [0.0] * len(pids))
    cpu_s = [max(cpus[i] for _, cpus in samples) - cpu_at_start[i] for i in range(len(pids))]
    summary = master.summary
    n_ledgers, total = ledger_sum(out)
    probe_path = out / "master_probe.json"
    return {
        "workers": workers, "users_per_worker": users_per_worker, "memo": memo_options, "exit_code": code,
        "workers_missing": master.stderr().count("failed to send heartbeat"), "summary": summary,
        "merge_problems": merge_problems(summary, n_ledgers, workers, total),
        "probe": json.loads(probe_path.read_text()) if probe_path.exists() else None,
        "drain_s": drain_s, "final_reports_s": final_reports_s(master.stderr()),
        "run_s": run_s, "master_cpu_s": cpu_s[0], "sim_cpu_percent": 100.0 * cpu_s[1] / run_s,
        "workers_cpu_percent": 100.0 * sum(cpu_s[2:]) / run_s,
        "busiest_worker_cpu_percent": 100.0 * max(cpu_s[2:]) / run_s,
        "sim_generated": after["generation_tokens"] - before["generation_tokens"],
        "sim_overruns": (after["overruns"] - before["overruns"]) / max(after["steps"] - before["steps"], 1),
        "sim_ttft_ms": 1e3 * (after["ttft_sum"] - before["ttft_sum"]) / max(after["ttft_n"] - before["ttft_n"], 1),
        "sim_itl_ms": 1e3 * (after["itl_sum"] - before["itl_sum"]) / max(after["itl_n"] - before["itl_n"], 1),
    }


def reference(streams: int, seconds: float = 30.0) -> dict:
    """What one simulator delivers to a raw client (bench/refclient.py: no Locust, no loadgen) at
    ``streams`` streams of the same requests: the simulator's and this machine's share of any lateness."""
    with running_sim(*SIM) as sim:
        before, c0, t0 = sim_counters(sim.url), cpu_seconds(sim.proc.pid), time.perf_counter()
        out = subprocess.run([sys.executable, str(ROOT / "bench/refclient.py"), sim.url, "--streams", str(streams),
                              "--seconds", str(seconds), "--warmup", "12", "--tokens", str(OUTPUT_TOKENS),
                              "--input-tokens", "64"], capture_output=True, text=True, timeout=seconds + 120)
        after, sim_cpu_s, wall_s = sim_counters(sim.url), cpu_seconds(sim.proc.pid) - c0, time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(f"refclient failed ({out.returncode}): {out.stderr[-2000:]}")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"\nreference: one simulator, a raw client (bench/refclient.py) holding {streams:,} streams: TTFT p50 "
          f"{r['ttft_p50_s'] * 1e3:.0f} ms, p99 {r['ttft_p99_s'] * 1e3:.0f} ms; chunk gap p50 {r['gap_p50_s'] * 1e3:.0f} "
          f"ms, p99 {r['gap_p99_s'] * 1e3:.0f} ms (truth {TTFT_MS:.0f} / {ITL_MS:.0f}); simulator CPU "
          f"{100 * sim_cpu_s / wall_s:.0f}%, client CPU {r['cpu_percent']:.0f}%; the simulator's own TTFT mean "
          f"{1e3 * (after['ttft_sum'] - before['ttft_sum']) / max(after['ttft_n'] - before['ttft_n'], 1):.0f} ms")
    return r


def report(r: dict) -> bool:
    """Print one run's figures; True when every check held."""
    s, probe, w = r["summary"], r["probe"], r["workers"]
    print(f"\n{w} workers x {r['users_per_worker']} users = {w * r['users_per_worker']:,} streams"
          f"{' (what-if: option defaults memoized on the workers)' if r['memo'] else ''}; simulator TTFT "
          f"{TTFT_MS:.0f} ms, ITL {ITL_MS:.0f} ms, {OUTPUT_TOKENS} tokens a request")
    print(f"  {'C':>6} {'users':>6} {'reqs':>6} {'errors':>6} {'TTFT p50':>9} {'p99':>6} {'ITL p50':>8} "
          f"{'p99':>6} {'cpu%':>5} {'lag p99':>8}  flags")
    for st in s["stages"]:
        c = st["client"]
        ms = {k: (st[k] or 0) * 1e3 for k in ("ttft_p50_s", "ttft_p99_s", "itl_p50_s", "itl_p99_s")}
        print(f"  {st['concurrency']:>6} {st['users'] or 0:>6} {st['requests']:>6} {st['error_count']:>6} "
              f"{ms['ttft_p50_s']:>9.0f} {ms['ttft_p99_s']:>6.0f} {ms['itl_p50_s']:>8.0f} {ms['itl_p99_s']:>6.0f} "
              f"{c['cpu_percent'] or 0:>5.0f} {(c['loop_lag_p99_s'] or 0) * 1e3:>7.1f}ms  {','.join(st['flags']) or '-'}")
    t, pre = s["totals"], s.get("preflight") or {}
    received, cut = t["received_output_tokens"], t.get("cancelled_requests", 0)
    probe_tokens = pre.get("output_tokens", 0) + pre.get("failed_output_tokens", 0)  # no window counts them
    checks = {
        f"the run completed (exit {r['exit_code']}, {r['workers_missing']} missed-heartbeat events)":
            r["exit_code"] == 0 and len(s["stages"]) == 2,
        "users exact in every stage": all(st["users"] == st["concurrency"] for st in s["stages"]),
        "master totals == sum of worker ledgers": not r["merge_problems"],
        f"simulator generated {r['sim_generated']:,.0f} tokens == received {received:,} + the start probes' "
        f"{probe_tokens}{f' (+ up to {cut:,}: requests cut at the stop)' if cut else ''}":
            0 <= r["sim_generated"] - received - probe_tokens <= cut,
    }
    for name, held in checks.items():
        print(f"  {'ok  ' if held else 'FAIL'} {name}")
    for p in r["merge_problems"]:
        print(f"       {p}")
    print(f"  the simulator's own view: TTFT mean {r['sim_ttft_ms']:.0f} ms, chunk gap mean {r['sim_itl_ms']:.0f} ms "
          f"(configured {TTFT_MS:.0f} / {ITL_MS:.0f}); overruns {100 * r['sim_overruns']:.1f}% of its timer passes")
    print(f"  CPU over {r['run_s']:.0f} s of run: simulator {r['sim_cpu_percent']:.0f}%, workers {r['workers_cpu_percent']:.0f}% in all "
          f"(busiest {r['busiest_worker_cpu_percent']:.0f}%); {t['requests']:,} requests, histogram counts "
          f"{t['histogram_counts']['ttft_s']:,} TTFT / {t['histogram_counts']['itl_token_s']:,} ITL")
    print(f"  the stop: {cut:,} requests cut (drain_s {r['drain_s']:g}), every worker's final report in "
          f"{r['final_reports_s'] if r['final_reports_s'] is not None else '?'} s (loadgen/fleet/final_reports.py)")
    n = probe["reports"] if probe else 0
    if n:
        listeners_ms = 1e3 * probe["listeners_cpu_s"] / n
        print(f"  master: {r['master_cpu_s']:.2f} CPU-s over the run ({100 * r['master_cpu_s'] / r['run_s']:.1f}% of a "
              f"core), {n} worker reports merged: {1e3 * r['master_cpu_s'] / n:.2f} ms of master CPU per report; the "
              f"report listeners {listeners_ms:.2f} ms a report (loadgen's merge "
              f"{1e3 * probe['loadgen_cpu_s'] / n:.2f} ms): 100 workers, one report each per "
              f"{REPORT_INTERVAL_S:.0f} s, would cost {100 / REPORT_INTERVAL_S * listeners_ms / 10:.1f}% of a core")
    return all(checks.values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default="8x128,16x640", help="comma-separated WORKERSxUSERS_PER_WORKER")
    ap.add_argument("--keep", metavar="DIR", help="write the runs' results and logs here and keep them")
    ap.add_argument("--what-if", choices=("auto", "never", "always"), default="auto",
                    help="also run with the workers' option defaults memoized: when a run lost workers (auto)")
    ap.add_argument("--drain-s", type=float, default=60.0,
                    help="stages.drain_s; a short one (e.g. 1) cuts requests at the stop, which the workers' "
                         "final reports must still ship (default 60: the drain finishes)")
    ap.add_argument("--no-reference", action="store_true",
                    help="skip the raw reference client at the largest stream count")
    args = ap.parse_args(argv)
    shapes = [tuple(int(x) for x in spec.split("x")) for spec in args.runs.split(",") if spec]
    ok = True
    with tempfile.TemporaryDirectory(prefix="bench-many-workers-") as tmp:
        for workers, users in shapes:
            shipped = run(workers, users, Path(args.keep or tmp), drain_s=args.drain_s)
            ok &= report(shipped)
            if args.what_if == "always" or (args.what_if == "auto" and shipped["workers_missing"]):
                report(run(workers, users, Path(args.keep or tmp), memo_options=True, drain_s=args.drain_s))
        if shapes and not args.no_reference:
            reference(max(w * u for w, u in shapes))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
