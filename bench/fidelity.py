"""(b) Fidelity: reported TTFT and per-token ITL against the simulator's known answer, at scale.

The simulator's ``fixed`` model sends the first chunk ``--ttft-ms`` after the request and then one
chunk of ``tokens_per_chunk`` tokens every ``tokens_per_chunk × --itl-ms``; so the truth is
TTFT = ttft_ms and per-token ITL = itl_ms for every request and token (p50 = p99 = the value).
One locust run, one stage per concurrency (default 256 and 1024 streams). Figures per stage:

- error = reported − truth, in ms and as a percentage of the truth, for TTFT p50/p99 and
  per-token ITL p50/p99 (summary.json)
- the client's self-check (CPU %, loop-lag p99, ``client_bound``) next to it, to see whether the
  flag goes up when the error does
- simulator overruns (``llmsim_step_overruns_total`` / ``llmsim_steps_total`` over the run): when
  non-zero the simulator itself was late and part of the error is not the client's
- a reference row per stage: bench/refclient.py (raw sockets, no Locust, no histograms) against a
  fresh simulator under the same load. What it sees late is the simulator's and the machine's
  share; our error minus the reference's is what our client adds. Per-token ITL of the reference
  = chunk gap / tokens per chunk.

    .venv/bin/python bench/fidelity.py [--stages 256,1024] [--tokens-per-chunk 1,4] [--processes N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from locustproc import BenchLocust  # noqa: E402
from simtools import sim_counters  # noqa: E402

from loadgen.sim.launch import running_sim  # noqa: E402

TTFT_MS, ITL_MS = 200.0, 20.0
INPUT_TOKENS, OUTPUT_TOKENS = 256, 200


def run_stage(concurrency: int, tokens_per_chunk: int, workdir: Path, duration_s: float,
              processes: int = 0) -> dict:
    sim_args = ("--preset", "fixed", "--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS),
                "--tokens-per-chunk", str(tokens_per_chunk), "--kv-tokens", "100000000",
                "--max-running", "100000")
    ramp_s, warmup_s = 5, 8
    with running_sim(*sim_args) as sim:
        before = sim_counters(sim.url)
        run = BenchLocust(sim.url, workdir / f"c{concurrency}-tpc{tokens_per_chunk}",
                          "--stages", str(concurrency), "--ramp", str(ramp_s), "--warmup", str(warmup_s),
                          "--stage-duration", str(duration_s), "--input-tokens", str(INPUT_TOKENS),
                          "--output-tokens", str(OUTPUT_TOKENS), processes=processes)
        try:
            code = run.wait(ramp_s + warmup_s + duration_s + 120)
        except BaseException:
            run.kill()
            raise
        after = sim_counters(sim.url)
    if code != 0:
        raise RuntimeError(f"locust exited {code}:\n{run.stderr()[-3000:]}")
    (stage,) = run.summary["stages"]
    with running_sim(*sim_args) as sim:
        ref = reference(sim.url, concurrency, ramp_s + warmup_s, duration_s)
    return {"stage": stage, "reference": ref, "tokens_per_chunk": tokens_per_chunk, "processes": processes,
            "sim_steps": after["steps"] - before["steps"], "sim_overruns": after["overruns"] - before["overruns"]}


def reference_cmd(url: str, streams: int, warmup_s: float, duration_s: float, output_tokens: int = OUTPUT_TOKENS,
                  input_tokens: int = INPUT_TOKENS, ramp_s: float = 0.0) -> list[str]:
    """The bench/refclient.py command for that load: ``streams`` started evenly over ``ramp_s``,
    measuring after ``warmup_s`` for ``duration_s``. It prints one JSON line (``reference_result``)."""
    return [sys.executable, str(Path(__file__).resolve().parent / "refclient.py"), url, "--streams", str(streams),
            "--seconds", str(warmup_s + duration_s), "--warmup", str(warmup_s), "--tokens", str(output_tokens),
            "--input-tokens", str(input_tokens), "--ramp", str(ramp_s)]


def reference_result(returncode: int, stdout: str, stderr: str) -> dict:
    if returncode != 0:
        raise RuntimeError(f"refclient failed ({returncode}): {stderr[-2000:]}")
    return json.loads(stdout.strip().splitlines()[-1])


def reference(url: str, streams: int, warmup_s: float, duration_s: float) -> dict:
    """bench/refclient.py in its own process, same load and timing as the locust stage."""
    out = subprocess.run(reference_cmd(url, streams, warmup_s, duration_s), capture_output=True, text=True,
                         timeout=warmup_s + duration_s + 180)
    return reference_result(out.returncode, out.stdout, out.stderr)


def _per(v: float | None, n: int) -> float | None:
    return None if v is None else v / n


def _err(reported: float | None, truth_ms: float) -> str:
    if reported is None:
        return "-"
    e = reported * 1000.0 - truth_ms
    return f"{e:+7.2f}ms {100 * e / truth_ms:+6.1f}%"


def print_rows(rows: list[dict]) -> None:
    print(f"truth: TTFT {TTFT_MS:.0f} ms, per-token ITL {ITL_MS:.0f} ms; error = reported - truth; "
          "ref = bench/refclient.py on a fresh simulator under the same load")
    print(f"{'C':>5} {'client':>6} {'procs':>5} {'tok/chunk':>9} {'tokens/s':>9} {'TTFT p50 err':>17} "
          f"{'TTFT p99 err':>17} {'ITL p50 err':>17} {'ITL p99 err':>17} {'self-check':>24} {'sim overruns':>13}")
    for r in rows:
        s, ref, tpc = r["stage"], r["reference"], r["tokens_per_chunk"]
        c = s.get("client") or {}
        lag = c.get("loop_lag_p99_s")
        check = (f"{c.get('cpu_percent')}% lag99 {lag * 1000:.1f}ms" if lag is not None else "-") + (
            " BOUND" if "client_bound" in s["flags"] else "")
        print(f"{s['concurrency']:>5} {'ours':>6} {r['processes'] or 1:>5} {tpc:>9} "
              f"{s['output_tokens_per_s'] or 0:>9,.0f} "
              f"{_err(s['ttft_p50_s'], TTFT_MS):>17} {_err(s['ttft_p99_s'], TTFT_MS):>17} "
              f"{_err(s['itl_p50_s'], ITL_MS):>17} {_err(s['itl_p99_s'], ITL_MS):>17} {check:>24} "
              f"{r['sim_overruns']:>6.0f}/{r['sim_steps']:<6.0f}")
        print(f"{s['concurrency']:>5} {'ref':>6} {1:>5} {tpc:>9} {'':>9} "
              f"{_err(ref['ttft_p50_s'], TTFT_MS):>17} {_err(ref['ttft_p99_s'], TTFT_MS):>17} "
              f"{_err(_per(ref['gap_p50_s'], tpc), ITL_MS):>17} {_err(_per(ref['gap_p99_s'], tpc), ITL_MS):>17} "
              f"{ref['cpu_percent']:>5.1f}% cpu, {ref['requests']} req", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stages", default="256,1024")
    ap.add_argument("--tokens-per-chunk", default="1,4",
                    help="per stage (comma-separated, last repeats): 4 at 1024 streams keeps the chunk "
                         "rate at 12.8k/s, which one client core and the simulator can both sustain")
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--processes", type=int, default=0, help="locust --processes (0: one process)")
    args = ap.parse_args(argv)
    stages = [int(x) for x in args.stages.split(",")]
    tpcs = [int(x) for x in args.tokens_per_chunk.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-fidelity-") as tmp:
        for i, c in enumerate(stages):
            rows.append(run_stage(c, tpcs[min(i, len(tpcs) - 1)], Path(tmp), args.duration, args.processes))
    print_rows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
