"""The same closed loop served by the HTTP simulator (real time) and by the virtual-time engine.

    .venv/bin/python bench/virtual_vs_http.py [--input-tokens 2000] [--users 64] [--seconds 30]

C raw-socket users (``tests.support.raw_client``, not loadgen's client: this checks the simulator's
two drivers, not the load generator) each keep one streamed request in flight against the HTTP
simulator for a while; the virtual driver plays the same C users on the same engine parameters.
Both keep the requests sent after the first third of the time and print their TTFT p50/p90, TPOT
p50 and E2E p50. A benchmark that prints, not a test: on a busy machine the real-time side lags.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import gevent

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from loadgen.sim.config import load  # noqa: E402
from loadgen.sim.launch import running_sim  # noqa: E402
from loadgen.whatif.rows import stage_row  # noqa: E402
from loadgen.whatif.virtual_sweep import run_sweep, stage_rules  # noqa: E402
from tests.support.raw_client import Connection  # noqa: E402

ENGINE = {"timing": "engine", "flavor": "sglang", "kv_tokens": 400000, "block_size": 1, "max_model_len": 8192,
          "step_base_ms": 12, "step_per_seq_ms": 0.4, "step_per_prefill_token_us": 30, "spec_accept": "0.2,0.3,0.5"}
OUTPUT = 100


def http_loop(prompt: int, users: int, seconds: float) -> list[tuple[float, float, float]]:
    """(sent, first token, last token) of every request, seconds since the users started."""
    out, stop = [], [False]

    def user(url: str, t0: float) -> None:
        conn = Connection(url)
        body = {"model": "m", "prompt": list(range(1, prompt + 1)), "max_tokens": OUTPUT, "ignore_eos": True,
                "stream": True}
        while not stop[0]:
            resp = conn.request("POST", "/v1/completions", body)
            times = [t for t, p in resp.events if b'"text"' in p]
            out.append((resp.t_sent - t0, times[0] - t0, times[-1] - t0))

    args = [x for k, v in ENGINE.items() for x in ("--" + k.replace("_", "-"), str(v))]
    with running_sim(*args) as sim:
        t0 = time.perf_counter()
        greenlets = [gevent.spawn(user, sim.url, t0) for _ in range(users)]
        gevent.sleep(seconds)
        stop[0] = True
        gevent.joinall(greenlets, timeout=60)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input-tokens", type=int, default=2000)
    ap.add_argument("--users", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=30.0)
    args = ap.parse_args()
    warm = args.seconds / 3
    reqs = [r for r in http_loop(args.input_tokens, args.users, args.seconds) if warm <= r[0] < args.seconds]
    ttft = [b - a for a, b, _ in reqs]
    print(f"HTTP    {len(reqs):>4} requests  TTFT p50 {statistics.median(ttft) * 1e3:7.1f} ms  "
          f"p90 {statistics.quantiles(ttft, n=10)[-1] * 1e3:7.1f} ms  "
          f"TPOT p50 {statistics.median((c - b) / (OUTPUT - 1) for _, b, c in reqs) * 1e3:6.2f} ms  "
          f"E2E p50 {statistics.median(c - a for a, _, c in reqs):5.2f} s")
    cfg = load(None, ENGINE)
    plan = stage_rules(ramp_s=0, warmup_s=warm, duration_s=args.seconds - warm, turnover=False, max_warmup_s=warm,
                       max_window_s=args.seconds - warm)
    (rec,) = run_sweep(cfg.engine_params(), [args.users], args.input_tokens, OUTPUT, plan,
                       tick_s=0)  # raw users: no shape, no ramp tick
    row = stage_row(rec, cfg.kv_tokens)
    print(f"virtual {row['requests']:>4} requests  TTFT p50 {row['ttft_p50_s'] * 1e3:7.1f} ms  "
          f"p90 {row['ttft_p90_s'] * 1e3:7.1f} ms  TPOT p50 {row['tpot_p50_s'] * 1e3:6.2f} ms  "
          f"E2E p50 {row['e2e_p50_s']:5.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
