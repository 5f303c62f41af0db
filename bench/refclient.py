"""A minimal reference client: what the simulator delivers, seen with as little client work as possible.

Raw gevent sockets (tests.support.raw_client, independent of loadgen.wire.client), closed-loop streams like
the Locust users, no histograms, no Locust. It shows how late the simulator and this machine make
the chunks under the same load, so fidelity.py can split an error into the part any client sees
and the part our client adds (reported − reference).

Run as a separate process; prints one JSON line:
    python bench/refclient.py URL --streams 256 --seconds 30 --warmup 8 --tokens 200

- TTFT = perf_counter() of the recv that completed the first content event − send time
- chunk gap = time between consecutive content events of a stream (one sample per gap)
Only requests sent after the warmup count.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import gevent
import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.support.raw_client import Connection  # noqa: E402


def content_times(events: list[tuple[float, bytes]]) -> list[float]:
    out = []
    for t, payload in events:
        if payload == b"[DONE]":
            continue
        choices = orjson.loads(payload).get("choices")
        if choices and choices[0].get("text"):
            out.append(t)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("url")
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=8.0)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--input-tokens", type=int, default=256)
    ap.add_argument("--ramp", type=float, default=0.0,
                    help="start the streams evenly over this many seconds (like locust's ramp), not all at once")
    args = ap.parse_args()
    body = {"model": "m", "prompt": list(range(1000, 1000 + args.input_tokens)), "max_tokens": args.tokens,
            "min_tokens": args.tokens, "ignore_eos": True, "stream": True}
    t0 = time.perf_counter()
    measure_from, stop_at = t0 + args.warmup, t0 + args.seconds
    ttft: list[float] = []
    gaps: list[np.ndarray] = []
    failures = [0]

    def user(i: int) -> None:
        gevent.sleep(args.ramp * i / args.streams)
        conn = Connection(args.url)
        while time.perf_counter() < stop_at:
            resp = conn.request("POST", "/v1/completions", body)
            if resp.error or resp.status != 200:
                failures[0] += 1
                conn.close()
                conn = Connection(args.url)
                continue
            if resp.t_sent < measure_from:
                continue
            ts = content_times(resp.events)
            if ts:
                ttft.append(ts[0] - resp.t_sent)
                gaps.append(np.diff(ts))
        conn.close()

    gevent.joinall([gevent.spawn(user, i) for i in range(args.streams)], timeout=args.seconds + 120)
    g = np.concatenate(gaps) if gaps else np.empty(0)
    cpu = os.times()
    print(json.dumps({
        "streams": args.streams, "requests": len(ttft), "failures": failures[0],
        "ttft_p50_s": float(np.percentile(ttft, 50)) if ttft else None,
        "ttft_p99_s": float(np.percentile(ttft, 99)) if ttft else None,
        "gap_p50_s": float(np.percentile(g, 50)) if len(g) else None,
        "gap_p99_s": float(np.percentile(g, 99)) if len(g) else None,
        "cpu_percent": 100 * (cpu.user + cpu.system) / (time.perf_counter() - t0),
    }), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
