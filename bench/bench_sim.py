"""Simulator capacity: tokens it emits per simulator CPU-second with 1024 concurrent streams.

    .venv/bin/python bench/bench_sim.py [--streams 1024] [--measure-s 15]

For each timing model it starts ``python -m loadgen.sim``, then a separate client process (raw
gevent sockets, no SSE parsing, keep-alive, 1 token per chunk) that holds ``--streams`` streams
open. Over the measurement window it reads from the simulator's ``/metrics`` and ``/proc``:

- emitted tokens/s = delta ``*:generation_tokens_total`` / window wall seconds
- tokens per sim CPU-second = delta generation tokens / delta simulator CPU seconds (user+sys)
  (target >= 50,000: one core then serves 1024 streams at ~50 tokens/s each)
- overruns = delta ``llmsim_step_overruns_total`` / delta ``llmsim_steps_total``
Bounded to about a minute in total.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MODELS = {
    # 1024 streams x 1 token / 20 ms = ~51k tokens/s offered
    "fixed": ["--preset", "fixed", "--ttft-ms", "20", "--itl-ms", "20"],
    # one step clock: 25 ms + 1024 x 0.385 ms per step, / time scale 20 -> ~21 ms wall per step
    "engine": ["--preset", "qwen35-397b-8gpu", "--spec-accept", "1", "--kv-tokens", "4000000",
               "--time-scale", "20", "--max-running", "2048"],
}
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14, 15)


def scrape(url: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    from tests.support.raw_client import request

    out = {}
    for fam in text_string_to_metric_families(request(url, "GET", "/metrics").body.decode()):
        for s in fam.samples:
            if s.name.endswith(("generation_tokens_total", "llmsim_steps_total", "llmsim_step_overruns_total")):
                out[s.name.split(":")[-1]] = s.value
    return out


def client_main(url: str, streams: int, duration_s: float, max_tokens: int) -> None:
    """Separate process: hold ``streams`` streams open for ``duration_s``; print a JSON summary."""
    import gevent
    from gevent import socket

    host, port = url.split("//")[1].split(":")
    body = json.dumps({"prompt": list(range(100)), "max_tokens": max_tokens, "ignore_eos": True,
                       "stream": True}).encode()
    req = (b"POST /v1/completions HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    stop_at = time.perf_counter() + duration_s
    totals = {"responses": 0, "bytes": 0, "errors": 0}

    def one_stream() -> None:
        sock = socket.create_connection((host, int(port)))
        while time.perf_counter() < stop_at:
            sock.sendall(req)
            tail = b""
            while True:
                data = sock.recv(65536)
                if not data:
                    totals["errors"] += 1
                    return
                totals["bytes"] += len(data)
                tail = (tail + data)[-5:]
                if tail == b"0\r\n\r\n":
                    break
            totals["responses"] += 1
        sock.close()

    gevent.joinall([gevent.spawn(one_stream) for _ in range(streams)], timeout=duration_s + 30)
    t = os.times()
    print(json.dumps({**totals, "cpu_s": t.user + t.system}), flush=True)


def bench_model(name: str, streams: int, measure_s: float) -> dict:
    from loadgen.sim.launch import running_sim

    ramp_s = 4.0
    with running_sim(*MODELS[name]) as sim:
        url, sim = sim.url, sim.proc
        client = subprocess.Popen([sys.executable, __file__, "--client", url, "--streams", str(streams),
                                   "--duration", str(ramp_s + measure_s), "--max-tokens", "2000"],
                                  stdout=subprocess.PIPE, text=True)
        try:
            time.sleep(ramp_s)
            m0, c0, t0 = scrape(url), cpu_seconds(sim.pid), time.perf_counter()
            time.sleep(measure_s)
            m1, c1, t1 = scrape(url), cpu_seconds(sim.pid), time.perf_counter()
        finally:
            client.kill()
            out, _ = client.communicate(timeout=30)
    tokens = m1["generation_tokens_total"] - m0["generation_tokens_total"]
    return {"model": name, "streams": streams, "tokens_per_s": tokens / (t1 - t0),
            "sim_cpu_pct": 100 * (c1 - c0) / (t1 - t0), "tokens_per_cpu_s": tokens / max(c1 - c0, 1e-9),
            "steps": m1["llmsim_steps_total"] - m0["llmsim_steps_total"],
            "overruns": m1["llmsim_step_overruns_total"] - m0["llmsim_step_overruns_total"]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=1024)
    ap.add_argument("--measure-s", type=float, default=15.0)
    ap.add_argument("--models", default="fixed,engine")
    ap.add_argument("--client", help=argparse.SUPPRESS)
    ap.add_argument("--duration", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--max-tokens", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client:
        client_main(args.client, args.streams, args.duration, args.max_tokens)
        return 0
    print(f"{'model':<7} {'streams':>7} {'tokens/s':>9} {'sim CPU':>8} {'tokens/CPU-s':>13} "
          f"{'overruns/steps':>15}")
    worst = None
    for name in args.models.split(","):
        r = bench_model(name, args.streams, args.measure_s)
        worst = r["tokens_per_cpu_s"] if worst is None else min(worst, r["tokens_per_cpu_s"])
        print(f"{r['model']:<7} {r['streams']:>7} {r['tokens_per_s']:>9.0f} {r['sim_cpu_pct']:>7.0f}% "
              f"{r['tokens_per_cpu_s']:>13.0f} {int(r['overruns']):>7}/{int(r['steps']):<7}", flush=True)
    print(f"target >= 50000 tokens per simulator CPU-second: {'met' if worst >= 50_000 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
