"""Time slices' costs (docs/soak.md), no I/O but the results files: what a soak pays for its slices.

- per-request overhead: client CPU-seconds of ``Collector.record_result`` with a slice open vs
  without (the slice is one more StageStats to add the same binned samples to), per 1000 requests;
- an open slice's memory: the bytes of one StageStats' histograms (a closed slice is a row: its
  StageStats is dropped);
- summary.json + report.html (no plots) rewritten with N slice rows, ms per write (a soak rewrites
  them at least once a minute, inside the event loop: this is the loop's stall), and its size;
- the drift verdict over N slices, ms.

    .venv/bin/python bench/soak_slices.py [--requests 5000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from loadgen.report.files import write_results  # noqa: E402
from loadgen.stats.drift import stage_drift  # noqa: E402
from loadgen.stats.slices import slice_row  # noqa: E402
from loadgen.stats.stage_stats import HISTOGRAMS, Collector, StageStats  # noqa: E402
from tests.support.request_results import ok_result  # noqa: E402


def record_cpu_s(results, sliced: bool) -> float:
    c = Collector()
    c.slice = (0, 0) if sliced else None
    t0 = time.process_time()
    for r in results:
        c.record_result(r, 0, 100, None)
    return time.process_time() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=5000)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    results = [ok_result(rng, chunks=200) for _ in range(args.requests)]
    record_cpu_s(results[:200], True)  # warm up
    plain = min(record_cpu_s(results, False) for _ in range(3))
    sliced = min(record_cpu_s(results, True) for _ in range(3))
    per_k = 1000 / args.requests
    print(f"record_result, 200-chunk requests: {plain * per_k * 1e3:.1f} ms CPU per 1000 without a slice, "
          f"{sliced * per_k * 1e3:.1f} ms with one (+{(sliced / plain - 1) * 100:.0f} %)")
    s = StageStats()
    print(f"an open slice's histograms: {sum(getattr(s, h).counts.nbytes for h in HISTOGRAMS) / 1024:.0f} KiB")
    one = StageStats()
    for r in results[:300]:
        one.add_result(r, 100, None)
    row = slice_row(0, 0, 0.0, 60.0, one, 60.0)
    for n in (240, 1440, 4320):  # 4 h, a day, three days of 60 s slices
        rows = [dict(row, slice=j, start_s=60.0 * j,
                     output_tokens_per_s=1000 + rng.standard_normal()) for j in range(n)]
        summary = {"schema": 1, "run": {}, "stages": [], "slices": rows}
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            write_results(d, summary, plots=False)
            write_ms = (time.perf_counter() - t0) * 1e3
            size_mb = (Path(d) / "summary.json").stat().st_size / 1e6
        t0 = time.perf_counter()
        stage_drift(rows, 60.0)
        drift_ms = (time.perf_counter() - t0) * 1e3
        print(f"{n:5d} slices: summary.json {size_mb:.1f} MB, summary + report.html rewritten in {write_ms:.0f} ms; "
              f"drift verdict {drift_ms:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
