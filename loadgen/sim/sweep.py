"""Closed-loop concurrency sweep of the ``engine`` model in simulated time (no sockets, no sleeps).

``C`` clients each keep one request in flight: when one finishes, the next is submitted at once.
Used to calibrate presets and by the tests. Also a CLI:

    python -m loadgen.sim.sweep --preset qwen35-397b-8gpu --concurrency 1,4,16,32,64,128,256,512,1024

Figures, all in simulated seconds:
- output tokens/s = tokens emitted in [warmup_s, warmup_s + measure_s) / measure_s
- TTFT p50 = median over requests submitted in the window of (first-token step end - submit time)
- preemptions = preemptions (vLLM) / retractions (SGLang) during the whole run
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass

from loadgen.sim.engine import Engine, EngineParams, SimRequest


@dataclass
class SweepPoint:
    concurrency: int
    output_tokens_per_s: float
    per_request_tokens_per_s: float  # output tokens/s / concurrency
    ttft_p50_s: float | None
    preemptions: int
    peak_running: int
    peak_waiting: int
    peak_kv_frac: float


def closed_loop(params: EngineParams, concurrency: int, prompt_tokens: int = 1000,
                output_tokens: int = 1000, warmup_s: float = 60.0, measure_s: float = 120.0) -> SweepPoint:
    engine = Engine(params)
    t = 0.0
    submitted: dict[int, float] = {}
    first_seen: set[int] = set()
    ttfts: list[float] = []

    def submit(now: float) -> None:
        req = SimRequest(prompt_tokens, output_tokens)
        submitted[id(req)] = now
        engine.submit(req)

    for _ in range(concurrency):
        submit(0.0)
    end = warmup_s + measure_s
    tokens = peak_run = peak_wait = peak_kv = 0
    while t < end:
        duration, events = engine.step()
        t += duration
        peak_run = max(peak_run, engine.num_running)
        peak_wait = max(peak_wait, engine.num_waiting)
        peak_kv = max(peak_kv, engine.kv_used)
        in_window = warmup_s <= t < end
        for req, n, done in events:
            if in_window:
                tokens += n
            key = id(req)
            if key not in first_seen:
                first_seen.add(key)
                if submitted[key] >= warmup_s:
                    ttfts.append(t - submitted[key])
            if done:
                del submitted[key]
                first_seen.discard(key)
                submit(t)
    rate = tokens / measure_s
    return SweepPoint(concurrency, rate, rate / concurrency, statistics.median(ttfts) if ttfts else None,
                      engine.stats.preemptions_total, peak_run, peak_wait, peak_kv / params.kv_tokens)


def main(argv: list[str] | None = None) -> int:
    from loadgen.sim.config import SimConfigError, load

    ap = argparse.ArgumentParser(prog="python -m loadgen.sim.sweep")
    ap.add_argument("--preset", default="qwen35-397b-8gpu")
    ap.add_argument("--concurrency", default="1,4,16,32,64,128,256,512,1024")
    ap.add_argument("--prompt-tokens", type=int, default=1000)
    ap.add_argument("--output-tokens", type=int, default=1000)
    ap.add_argument("--measure-s", type=float, default=120.0)
    args = ap.parse_args(argv)
    try:
        params = load(args.preset, {"timing": "engine"}).engine_params()
    except SimConfigError as exc:
        print(f"llmsim.sweep: {exc}")
        return 2
    print(f"{'C':>5} {'out tok/s':>10} {'per req':>8} {'TTFT p50':>9} {'preempt':>8} {'run':>5} "
          f"{'wait':>5} {'kv peak':>7}")
    for c in (int(x) for x in args.concurrency.split(",")):
        p = closed_loop(params, c, args.prompt_tokens, args.output_tokens, measure_s=args.measure_s)
        ttft = f"{p.ttft_p50_s:.2f}s" if p.ttft_p50_s is not None else "-"
        print(f"{c:>5} {p.output_tokens_per_s:>10.0f} {p.per_request_tokens_per_s:>8.1f} {ttft:>9} "
              f"{p.preemptions:>8} {p.peak_running:>5} {p.peak_waiting:>5} {p.peak_kv_frac:>7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
