"""(a) Ingest: tokens per client CPU-second through the real Locust user, from a flood source.

nginx serves a static 1000-token vLLM completions stream (bench/flood.py), so the client is the
only limit. One stage at ``--concurrency`` users, default scenario settings (per-chunk usage, every
histogram) plus the Prometheus exporter, scraped every 5 s like Prometheus would. Figures:

- output tokens/s = the stage's ``output_tokens_per_s`` (summary.json: tokens whose chunks arrived
  in the window / window seconds)
- client CPU % = delta CPU seconds of the locust process tree (master + workers, /proc) / delta wall
  seconds, over the inner part of the window (100 = one core)
- tokens per client CPU-second = output tokens/s / (client CPU % / 100)
- reported TTFT p50/p99 (summary.json); the truth is ~0: nginx sends the stream with its headers

Variants: ``default`` is ``locustfile.py`` as shipped (the targets apply to it); ``fair`` is
bench/tuned_locustfile.py with 32 KB reads and a yield to the other streams after every full read
(a candidate client change, measured here before anyone makes it in loadgen/wire/client.py).

    .venv/bin/python bench/ingest.py [--processes 0,2] [--variants default,fair] [--duration 20]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from flood import find_nginx, free_port, running_flood  # noqa: E402
from locustproc import BenchLocust, Sampler  # noqa: E402

TARGET_PER_CORE = 200_000
TARGET_TOTAL = 110_000
TARGET_TTFT_P50_S = 0.005


def gauge(text: str, name: str) -> float | None:
    m = re.search(rf"^{name}{{[^}}]*}} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def window_cpu(samples: list[dict], lo: float, hi: float) -> tuple[float, float]:
    """(delta CPU seconds, delta wall seconds) between the first sample >= lo and the last <= hi."""
    inside = [s for s in samples if lo <= s["t"] <= hi]
    if len(inside) < 2:
        raise RuntimeError(f"only {len(inside)} CPU samples inside the window; lengthen --duration")
    return inside[-1]["cpu_s"] - inside[0]["cpu_s"], inside[-1]["t"] - inside[0]["t"]


VARIANTS = {
    "default": ("locustfile.py", {}),
    "fair": ("bench/tuned_locustfile.py", {"LLM_BENCH_RECV_BYTES": "32768", "LLM_BENCH_YIELD_BYTES": "16384"}),
}


def run_one(url: str, processes: int, concurrency: int, duration_s: float, workdir: Path,
            extra: tuple[str, ...] = (), locustfile: str = "locustfile.py", env: dict | None = None,
            variant: str = "default") -> dict:
    ramp_s, warmup_s = 1, 3
    run = BenchLocust(url, workdir / f"{variant}-p{processes}", "--stages", str(concurrency), "--ramp", str(ramp_s),
                      "--warmup", str(warmup_s), "--stage-duration", str(duration_s),
                      "--input-tokens", "1000", "--output-tokens", "1000",
                      "--kv-capacity-tokens", "1000000000", *extra,
                      processes=processes, exporter_port=free_port(), locustfile=locustfile, env=env)
    cpu = Sampler(run.sample, 0.5)
    scrapes = Sampler(run.scrape, 5.0)
    try:
        t_ramp = run.wait_for(r"stage 0 C=\d+: ramp", 60)
        cpu.start()
        scrapes.start()
        code = run.wait(ramp_s + warmup_s + duration_s + 60)
    except BaseException:
        run.kill()
        raise
    finally:
        samples, scraped = cpu.stop(), scrapes.stop()
    if code != 0:
        raise RuntimeError(f"locust exited {code}:\n{run.stderr()[-3000:]}")
    (stage,) = run.summary["stages"]
    open_t = t_ramp + ramp_s + warmup_s
    d_cpu, d_wall = window_cpu(samples, open_t + 1.5, open_t + duration_s - 1.0)
    cpu_pct = 100.0 * d_cpu / d_wall
    tps = stage["output_tokens_per_s"]
    return {
        "variant": variant, "processes": processes, "concurrency": concurrency, "tokens_per_s": tps,
        "client_cpu_percent": cpu_pct, "tokens_per_cpu_s": tps / (cpu_pct / 100.0),
        "ttft_p50_s": stage["ttft_p50_s"], "ttft_p99_s": stage["ttft_p99_s"],
        "itl_p50_s": stage["itl_p50_s"], "requests": stage["requests"], "errors": stage["error_count"],
        "health": stage.get("client"), "flags": stage["flags"], "scrapes": len(scraped),
        # the exporter's live self-check gauges, the highest value any scrape saw
        "gauge_cpu_max": max((gauge(t, "llm_loadgen_client_cpu_percent") or 0 for t, _ in scraped), default=None),
        "gauge_lag_max_s": max((gauge(t, "llm_loadgen_client_loop_lag_seconds") or 0 for t, _ in scraped),
                               default=None),
        "scrape_s_max": max((s[1] for s in scraped), default=None),
    }


def print_rows(rows: list[dict]) -> None:
    print(f"{'variant':>8} {'procs':>5} {'C':>4} {'tokens/s':>9} {'client CPU':>10} {'tokens/CPU-s':>12} "
          f"{'TTFT p50':>9} {'TTFT p99':>9} {'self-check (summary.json)':>32} {'exporter gauges (max)':>24}")
    for r in rows:
        h = r["health"] or {}
        check = (f"cpu {h.get('cpu_percent')}% lag99 {_ms(h.get('loop_lag_p99_s'))}"
                 f"{' BOUND' if 'client_bound' in r['flags'] else ''}")
        print(f"{r['variant']:>8} {r['processes'] or 1:>5} {r['concurrency']:>4} {r['tokens_per_s']:>9,.0f} "
              f"{r['client_cpu_percent']:>9.0f}% {r['tokens_per_cpu_s']:>12,.0f} "
              f"{_ms(r['ttft_p50_s']):>9} {_ms(r['ttft_p99_s']):>9} {check:>32} "
              f"{_gauges(r):>24}", flush=True)


def _gauges(r: dict) -> str:
    if r["gauge_cpu_max"] is None:
        return "no scrape"
    return f"cpu {r['gauge_cpu_max']:.0f}% lag {_ms(r['gauge_lag_max_s'])}"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.2f}ms"


def verdicts(rows: list[dict]) -> list[str]:
    """Targets, judged on the default variant (as shipped)."""
    out = []
    rows = [r for r in rows if r.get("variant", "default") == "default"] or rows
    best_core = max(r["tokens_per_cpu_s"] for r in rows)
    best_total = max(r["tokens_per_s"] for r in rows)
    ttft = min(r["ttft_p50_s"] for r in rows)
    out.append(f"tokens per client CPU-second >= {TARGET_PER_CORE:,}: "
               f"{'met' if best_core >= TARGET_PER_CORE else 'NOT met'} (best {best_core:,.0f})")
    out.append(f"output tokens/s >= {TARGET_TOTAL:,}: {'met' if best_total >= TARGET_TOTAL else 'NOT met'} "
               f"(best {best_total:,.0f})")
    out.append(f"reported TTFT p50 < {TARGET_TTFT_P50_S * 1000:.0f} ms on the flood: "
               f"{'met' if ttft < TARGET_TTFT_P50_S else 'NOT met'} (best {ttft * 1000:.2f} ms)")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", default="0,2", help="comma-separated: 0 = one process, N = --processes N")
    ap.add_argument("--variants", default="default", help=f"comma-separated subset of {','.join(VARIANTS)}")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--duration", type=float, default=20.0)
    args = ap.parse_args(argv)
    if find_nginx() is None:
        print("ingest: SKIPPED, nginx not found (sh scripts/ensure-nginx.sh)")
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp, running_flood(1000, 1000) as url:
        for variant in args.variants.split(","):
            locustfile, env = VARIANTS[variant]
            for p in (int(x) for x in args.processes.split(",")):
                rows.append(run_one(url, p, args.concurrency, args.duration, Path(tmp), locustfile=locustfile,
                                    env=env, variant=variant))
                time.sleep(1)
    print_rows(rows)
    for line in verdicts(rows):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
