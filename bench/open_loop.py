"""(f) Open loop: the highest request rate one process holds on schedule.

One locust process in open-loop mode (``--rates``, Poisson arrivals) against the simulator's
``fixed`` model with short requests (16 input, 4 output tokens, TTFT 10 ms, ITL 5 ms: E2E 25 ms,
so 1000 requests/s keep ~25 in flight). Each stage's send lateness, t(actual send) - t(scheduled),
comes from summary.json (``lateness_p99_s``); a process *holds* a rate when the p99 stays under
5 ms (client_check.lateness_p99_s_max) and nothing was dropped. Printed per stage: offered,
scheduled and achieved req/s, lateness p50-ish (the p99 is the target), the client's CPU %, and
the verdict; then the highest rate held.

    .venv/bin/python bench/open_loop.py [--rates 100,250,500,750,1000,1500,2000] [--window 8]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from locustproc import BenchLocust  # noqa: E402

from loadgen.sim.launch import running_sim  # noqa: E402

LATENESS_P99_MAX_S = 0.005


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="100,250,500,750,1000,1500,2000")
    ap.add_argument("--window", type=float, default=8.0, help="measured seconds per stage")
    args = ap.parse_args(argv)
    sim_args = ("--preset", "fixed", "--ttft-ms", "10", "--itl-ms", "5", "--max-running", "100000",
                "--kv-tokens", "100000000")
    with tempfile.TemporaryDirectory() as tmp, running_sim(*sim_args) as sim:
        run = BenchLocust(sim.url, Path(tmp) / "open", "--scenario", "config/smoke.yaml",
                          "--input-tokens", "16", "--output-tokens", "4", "--rates", args.rates,
                          "--warmup", "2", "--stage-duration", str(args.window), "--max-inflight", "4096")
        try:
            code = run.wait(60 + len(args.rates.split(",")) * (args.window + 20))
        except BaseException:
            run.kill()
            raise
        if code not in (0, 1):
            print(run.stderr()[-3000:])
            return 1
        stages = run.summary["stages"]
    print(f"{'offered/s':>10}{'sched/s':>9}{'achieved/s':>11}{'late p99 ms':>12}{'dropped':>8}{'CPU %':>7}"
          f"{'loop p99 ms':>12}  holds")
    held = None
    for s in stages:
        late, client = s.get("lateness_p99_s"), s.get("client") or {}
        ok = late is not None and late < LATENESS_P99_MAX_S and not s.get("dropped_by_client")
        if ok and (held is None or s["offered_rate_per_s"] > held):
            held = s["offered_rate_per_s"]
        lag = client.get("loop_lag_p99_s")
        print(f"{s['offered_rate_per_s']:>10.0f}{s['scheduled_rate_per_s'] or 0:>9.0f}"
              f"{s['achieved_rate_per_s'] or 0:>11.0f}{(late or 0) * 1e3:>12.2f}{s['dropped_by_client']:>8}"
              f"{client.get('cpu_percent') or 0:>7.0f}{(lag or 0) * 1e3:>12.2f}  {'yes' if ok else 'no'}")
    print(f"highest rate one process held with send lateness p99 < {LATENESS_P99_MAX_S * 1e3:g} ms: "
          f"{'none of those tried' if held is None else f'{held:g} requests/s'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
