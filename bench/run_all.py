"""`make bench`: every client and simulator benchmark, as per-CPU-second rates and ratios.

Sections (each bounded to about 1-2 minutes, the soak to a few):

  datapath  bench/bench_datapath.py  SSE decode -> record -> stats, tokens per CPU-second (no I/O)
  ingest    bench/ingest.py          (a) the real locust user on an nginx flood: tokens per client
                                     CPU-second, tokens/s with 1 and 2 processes, reported TTFT;
                                     as shipped and with a candidate fairness change ("fair")
  fidelity  bench/fidelity.py        (b) reported TTFT / ITL vs the simulator's known answer at
                                     256 and 1024 streams, next to the client's self-check
  capacity  bench/capacity.py        the chunks/s ONE client process holds with reported TTFT and
                                     ITL p99 within 2 ms of the truth (1 token per chunk, streams
                                     stepped 128..640, a run each, a raw probe client beside), chunks per
                                     client CPU-second (~3.5 min)
  memory    bench/memory.py          (c) RSS of one process with 1024 streaming users
  sim       bench/bench_sim.py       (d) the simulator's emission rate per simulator CPU-second
  soak      bench/soak.py            (e) RSS / exporter series / scrape time per simulated hour
  slices    bench/soak_slices.py     a soak's time slices: per-request overhead, an open slice's memory,
                                     summary.json rewrite and drift verdict times with 240..4320 slices
  open_loop bench/open_loop.py       (f) the highest request rate one process holds on schedule
                                     (send lateness p99 < 5 ms)
  workers   bench/many_workers.py    8 x 128 and 16 x 640 workers x users on one master: users and
                                     merge exact, the master's CPU per worker report (4-6 minutes)
  repeat    bench/repeat_coverage.py share of --repeat's 95 % intervals holding the simulator's true
                                     value (4 experiments x 5 repetitions, ~8 minutes; report.html,
                                     intervals.png, coverage.png in results/repeat_coverage/)

This machine is shared and noisy: wall times are never targets; compare rates per CPU-second and
ratios, and rerun a section (``--only ingest``) before believing a surprise.

    .venv/bin/python bench/run_all.py [--only ingest,fidelity] [--soak-minutes 3]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

SECTIONS = ("datapath", "ingest", "fidelity", "capacity", "memory", "sim", "soak", "slices", "open_loop", "workers",
            "repeat")


def _script(name: str, *args: str) -> int:
    """Run another engineer's bench script as it is, its output passed through."""
    return subprocess.run([sys.executable, str(HERE / name), *args], cwd=HERE.parent).returncode


def run_section(name: str, args) -> int:
    if name == "datapath":
        return _script("bench_datapath.py")
    if name == "sim":
        return _script("bench_sim.py", "--measure-s", "10")
    if name == "ingest":
        import ingest

        return ingest.main(["--processes", "0,2", "--variants", "default,fair", "--duration", "20"])
    if name == "fidelity":
        import fidelity

        return fidelity.main(["--stages", "256,1024", "--tokens-per-chunk", "1,4"])
    if name == "capacity":
        import capacity

        return capacity.main([])
    if name == "memory":
        import memory

        return memory.main(["--users", "1024"])
    if name == "soak":
        import soak

        return soak.main(["--minutes", str(args.soak_minutes), "--time-scale", "50"])
    if name == "slices":
        return _script("soak_slices.py")
    if name == "open_loop":
        import open_loop

        return open_loop.main([])
    if name == "workers":
        import many_workers

        return many_workers.main(["--runs", "8x128,16x640"])
    if name == "repeat":
        return _script("repeat_coverage.py", "--experiments", "4")
    raise ValueError(f"unknown section {name!r}; choose from {', '.join(SECTIONS)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated subset of {','.join(SECTIONS)}")
    ap.add_argument("--soak-minutes", type=float, default=3.0)
    args = ap.parse_args()
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        ap.error(f"unknown section(s) {unknown}; choose from {', '.join(SECTIONS)}")
    failed = []
    for name in names:
        print(f"\n== {name} " + "=" * (70 - len(name)), flush=True)
        t0 = time.perf_counter()
        try:
            code = run_section(name, args)
        except Exception:  # one broken section must not hide the others' figures
            traceback.print_exc()
            code = 1
        if code:
            failed.append(name)
        print(f"({name}: {time.perf_counter() - t0:.0f} s wall{', FAILED' if code else ''})", flush=True)
    if failed:
        print(f"\nbench sections that failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
