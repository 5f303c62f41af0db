"""(e) Soak: does the client grow with time? RSS, exporter series and scrape time over a long run.

A long run compressed with the simulator's time factor: ``--time-scale 50`` makes every simulated
second last 20 ms, so a few wall minutes carry hours of simulated traffic (TTFT 200 ms and 20 ms per
token in simulated time; 4 tokens per chunk keep the chunk rate within one client core). One stage
at ``--users``, the exporter on and scraped every ``--scrape-s`` like Prometheus would. Figures:

- simulated hours = wall seconds of the window × time scale / 3600
- RSS growth = least-squares slope of VmRSS (MB) against simulated hours, over the measurement
  window after its first 20% (allocator warm-up); likewise exporter series (non-comment lines of
  /metrics) per simulated hour, and the scrape time at the start and end
- requests per simulated hour, for scale (growth per request = growth per hour / requests per hour)
Expected: flat (|RSS slope| of a few MB/h at most; 0 series/h).

    .venv/bin/python bench/soak.py [--minutes 3] [--time-scale 50] [--users 16]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from flood import free_port  # noqa: E402
from locustproc import BenchLocust, Sampler  # noqa: E402
from procstat import memory_mb  # noqa: E402

from loadgen.sim.launch import running_sim  # noqa: E402


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope dy/dx (0 with fewer than 2 distinct x)."""
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    return 0.0 if sxx == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx


def series_count(text: str) -> int:
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def soak(minutes: float, time_scale: float, users: int, scrape_s: float, workdir: Path) -> dict:
    duration_s = minutes * 60
    ramp_s, warmup_s = 2, 10
    sim_args = ("--preset", "fixed", "--ttft-ms", "200", "--itl-ms", "20", "--tokens-per-chunk", "4",
                "--time-scale", str(time_scale), "--kv-tokens", "100000000")
    with running_sim(*sim_args) as sim:
        run = BenchLocust(sim.url, workdir, "--stages", str(users), "--ramp", str(ramp_s), "--warmup",
                          str(warmup_s), "--stage-duration", str(duration_s), exporter_port=free_port())

        def sample() -> dict:
            text, took = run.scrape()
            return {"t": time.perf_counter(), "rss": memory_mb(run.pid).get("rss"),
                    "series": series_count(text), "scrape_s": took}

        sampler = Sampler(sample, scrape_s)
        try:
            t_ramp = run.wait_for(r"stage 0 C=\d+: ramp", 60)
            sampler.start()
            code = run.wait(ramp_s + warmup_s + duration_s + 120)
        except BaseException:
            run.kill()
            raise
        finally:
            samples = sampler.stop()
    if code != 0:
        raise RuntimeError(f"locust exited {code}:\n{run.stderr()[-3000:]}")
    (stage,) = run.summary["stages"]
    open_t = t_ramp + ramp_s + warmup_s
    settled = open_t + 0.2 * duration_s
    inside = [s for s in samples if settled <= s["t"] <= open_t + duration_s and s["rss"]]
    if len(inside) < 4:
        raise RuntimeError(f"only {len(inside)} samples in the window; lengthen --minutes")
    hours = [(s["t"] - open_t) * time_scale / 3600 for s in inside]
    sim_hours = stage["window_s"] * time_scale / 3600
    return {
        "users": users, "time_scale": time_scale, "wall_s": stage["window_s"], "sim_hours": sim_hours,
        "requests_per_sim_hour": stage["requests"] / sim_hours, "errors": stage["error_count"],
        "rss_start_mb": inside[0]["rss"], "rss_end_mb": inside[-1]["rss"],
        "rss_mb_per_sim_hour": slope(hours, [s["rss"] for s in inside]),
        # the same over the second half only: a slope that shrinks is warm-up, one that holds is a leak
        "rss_mb_per_sim_hour_late": slope(hours[len(hours) // 2:], [s["rss"] for s in inside[len(hours) // 2:]]),
        "series_start": inside[0]["series"], "series_end": inside[-1]["series"],
        "series_per_sim_hour": slope(hours, [s["series"] for s in inside]),
        "scrape_ms_start": inside[0]["scrape_s"] * 1000, "scrape_ms_end": inside[-1]["scrape_s"] * 1000,
        "scrape_ms_max": max(s["scrape_s"] for s in inside) * 1000, "samples": len(inside),
        "flags": stage["flags"], "client": stage.get("client"),
    }


def print_result(r: dict) -> None:
    print(f"soak: {r['users']} users, time scale {r['time_scale']:g}: {r['wall_s']:.0f} s wall = "
          f"{r['sim_hours']:.2f} simulated h, {r['requests_per_sim_hour']:,.0f} requests per simulated h, "
          f"{r['errors']} errors, {r['samples']} samples")
    per_k = r["rss_mb_per_sim_hour"] / r["requests_per_sim_hour"] * 1e6 if r["requests_per_sim_hour"] else 0
    print(f"  RSS    {r['rss_start_mb']:.1f} -> {r['rss_end_mb']:.1f} MB   slope {r['rss_mb_per_sim_hour']:+.2f} "
          f"MB per simulated h ({per_k:+.1f} KB per 1000 requests); second half "
          f"{r['rss_mb_per_sim_hour_late']:+.2f} MB per simulated h")
    print(f"  series {r['series_start']} -> {r['series_end']}   slope {r['series_per_sim_hour']:+.2f} "
          f"per simulated h")
    print(f"  scrape {r['scrape_ms_start']:.1f} -> {r['scrape_ms_end']:.1f} ms (max {r['scrape_ms_max']:.1f} ms)"
          f"{'   flags: ' + ','.join(r['flags']) if r['flags'] else ''}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=3.0, help="measured wall minutes")
    ap.add_argument("--time-scale", type=float, default=50.0)
    ap.add_argument("--users", type=int, default=16)
    ap.add_argument("--scrape-s", type=float, default=5.0)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp:
        print_result(soak(args.minutes, args.time_scale, args.users, args.scrape_s, Path(tmp)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
