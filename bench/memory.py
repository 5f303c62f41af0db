"""(c) Memory: resident set of one locust process running 1024 streaming users.

Seeds-shaped requests (1000 input, 1000 output tokens) against the simulator (``fixed``: TTFT 200 ms,
20 ms per token, 4 tokens per chunk so one core keeps up), one process, one stage. Figures from
/proc/<pid>/status of the locust process:

- RSS before the ramp (locust, our modules, numpy, the exporter: no users yet)
- peak RSS while streaming = VmHWM one second before the window closes; RSS then
- peak RSS of the run = the highest VmHWM seen, up to the end of the run (drain, final report and
  plots included: matplotlib alone adds ~20-30 MB)
- per user = (peak RSS while streaming − RSS before the ramp) / users
Target: peak RSS of the run <= 300 MB at 1024 users.

    .venv/bin/python bench/memory.py [--users 1024] [--duration 30]
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

from loadgen.sim.launch import running_sim  # noqa: E402

TARGET_MB = 300.0
SIM = ("--preset", "fixed", "--ttft-ms", "200", "--itl-ms", "20", "--tokens-per-chunk", "4",
       "--kv-tokens", "100000000", "--max-running", "100000")


def measure(users: int, duration_s: float, workdir: Path, *extra: str) -> dict:
    """One run; ``extra``: more locust options (e.g. ``--requests-jsonl``)."""
    ramp_s, warmup_s = 10, 10
    with running_sim(*SIM) as sim:
        run = BenchLocust(sim.url, workdir, "--stages", str(users), "--ramp", str(ramp_s),
                          "--warmup", str(warmup_s), "--stage-duration", str(duration_s), *extra,
                          exporter_port=free_port())
        mem = Sampler(lambda: run.sample()["mem"].get(run.pid, {}), 1.0)
        try:
            t_ramp = run.wait_for(r"stage 0 C=\d+: ramp", 60)
            before = run.sample()["mem"][run.pid]
            mem.start()
            time.sleep(max(0.0, t_ramp + ramp_s + warmup_s + duration_s - 1 - time.perf_counter()))
            at_end = run.sample()["mem"][run.pid]  # all users streaming, the window about to close
            code = run.wait(180)
        except BaseException:
            run.kill()
            raise
        finally:
            samples = [s for s in mem.stop() if s]
    if code != 0:
        raise RuntimeError(f"locust exited {code}:\n{run.stderr()[-3000:]}")
    (stage,) = run.summary["stages"]
    peak = max([at_end["hwm"], *(s["hwm"] for s in samples)])
    return {"users": users, "rss_before_mb": before["rss"], "rss_peak_mb": peak, "rss_end_mb": at_end["rss"],
            "hwm_window_mb": at_end["hwm"], "per_user_kb": (at_end["hwm"] - before["rss"]) * 1000 / users, "requests": stage["requests"],
            "errors": stage["error_count"], "tokens_per_s": stage["output_tokens_per_s"],
            "flags": stage["flags"], "client": stage.get("client"),
            "totals": run.summary["totals"], "results_dir": workdir}


def print_row(r: dict) -> None:
    print(f"{'users':>6} {'RSS before':>10} {'peak streaming':>14} {'RSS streaming':>13} {'peak run':>9} "
          f"{'per user':>9} {'tokens/s':>9} {'requests':>8} {'errors':>6}")
    print(f"{r['users']:>6} {r['rss_before_mb']:>8.0f}MB {r['hwm_window_mb']:>12.0f}MB {r['rss_end_mb']:>11.0f}MB "
          f"{r['rss_peak_mb']:>7.0f}MB "
          f"{r['per_user_kb']:>7.0f}KB {r['tokens_per_s'] or 0:>9,.0f} {r['requests']:>8} {r['errors']:>6}"
          f"{'  ' + ','.join(r['flags']) if r['flags'] else ''}")
    ok = r["rss_peak_mb"] <= TARGET_MB
    print(f"peak RSS <= {TARGET_MB:.0f} MB at {r['users']} users: {'met' if ok else 'NOT met'}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=1024)
    ap.add_argument("--duration", type=float, default=30.0)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        print_row(measure(args.users, args.duration, Path(tmp)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
