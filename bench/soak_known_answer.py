"""The drift verdict on real 10-minute soaks (docs/soak.md): its false alarms on a steady simulator
over many seeds, and its slope and detection delay on a drifting one.

Every soak is a real `locust -f locustfile.py` run against its own simulator (fixed timing, 6x
faster than wall time, so 10 wall minutes are one simulated hour), one stage of C=8 with output
lengths 25-75 (users out of step), `--slice-s 30` (20 slices), the default drift thresholds and
alpha. The drifting simulator slows decoding by DRIFT_PCT %/simulated hour: its wall ITL p50 rises
from ITL_MS/6 along a known line, slope ITL_MS x DRIFT_PCT / 100 ms per wall hour.

    .venv/bin/python bench/soak_known_answer.py [--seeds 10] [--minutes 10] [--parallel 11]

Prints, per soak: the flag, what moved and the ITL p50 slope; then the false alarms (steady soaks
flagged), the drifting soak's slope error, and its detection delay: the fewest first slices over
which the run's own verdict already calls the drift.
All soaks run at once by default (about a third of a core each here): the machine's noise is part
of what a steady soak must not call drift.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadgen.sim.launch import running_sim  # noqa: E402
from loadgen.stats.drift import DriftConfig, stage_drift  # noqa: E402

TIME_SCALE, ITL_MS, TTFT_MS, DRIFT_PCT = 6, 60, 600, 50
SLICE_S = 30


def soak(seed: int, drift: bool, minutes: float, out: Path) -> dict:
    sim_args = ["--preset", "fixed", "--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS), "--time-scale",
                str(TIME_SCALE), "--seed", str(seed)]
    if drift:
        sim_args += ["--drift-decode-pct-per-h", str(DRIFT_PCT)]
    with running_sim(*sim_args) as sim:
        cmd = [sys.executable, "-m", "locust", "--headless", "-f", str(ROOT / "locustfile.py"), "--host", sim.url,
               "--loglevel", "WARNING", "--results-dir", str(out), "--scenario", "config/smoke.yaml",
               "--stages", "8", "--warmup", "10", "--stage-duration", str(int(minutes * 60)), "--slice-s", str(SLICE_S),
               "--output-dist", "uniform", "--output-min", "25", "--output-max", "75", "--set", f"prompt.seed={seed}"]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=minutes * 60 + 300)
    summary = json.loads(next(out.glob("*/summary.json")).read_text())
    (stage,) = summary["stages"]
    return {"seed": seed, "drift_sim": drift, "code": done.returncode, "flags": stage["flags"],
            "drift": stage.get("drift"), "slices": len(summary.get("slices", [])),
            "called_at": called_at(summary.get("slices", []), summary["scenario"])}


def called_at(slices: list[dict], scenario: dict) -> int | None:
    """The detection delay: the fewest first slices over which the verdict (the run's own
    ``stage_drift``, with the run's drift settings) already calls drift; None if it never does."""
    config = DriftConfig(**scenario["drift"])
    for k in range(config.min_slices, len(slices) + 1):
        if stage_drift(slices[:k], SLICE_S, config)["drift"]:
            return k
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--parallel", type=int, default=11)
    ap.add_argument("--drifting-only", action="store_true", help="only the drifting soak (its delay and slope)")
    opts = ap.parse_args()
    jobs = ([] if opts.drifting_only else [(s, False) for s in range(opts.seeds)]) + [(100, True)]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(opts.parallel) as pool:
        results = list(pool.map(lambda j: soak(j[0], j[1], opts.minutes, Path(tmp) / f"s{j[0]}"), jobs))
    truth_s_per_h = ITL_MS / 1000 * DRIFT_PCT / 100
    false_alarms = 0
    for r in results:
        moved = {m["series"]: m for m in (r["drift"] or {}).get("moved", [])}
        itl = moved.get("itl_p50", {})
        print(f"seed {r['seed']:>3} {'drifting' if r['drift_sim'] else 'steady  '} exit {r['code']} slices {r['slices']:>2} "
              f"flag {'drift' if 'drift' in r['flags'] else '-':<5} moved {sorted(moved) or '-'} "
              f"itl_p50 slope {itl.get('slope_per_h', float('nan')):.4f} s/h since {itl.get('since_s', '-')}")
        if not r["drift_sim"] and "drift" in r["flags"]:
            false_alarms += 1
    drifting = next(r for r in results if r["drift_sim"])
    moved = {m["series"]: m for m in (drifting["drift"] or {}).get("moved", [])}
    slope = moved.get("itl_p50", {}).get("slope_per_h")
    if not opts.drifting_only:
        print(f"false alarms: {false_alarms} of {opts.seeds} steady {opts.minutes:g}-minute soaks")
    delay = drifting["called_at"]
    print(f"detection delay: the verdict calls the drift from the first {delay} slices "
          f"({delay * SLICE_S} s of the window)" if delay else "detection delay: never called")
    print(f"drifting soak: flagged {'drift' in drifting['flags']}, itl_p50 slope {slope} s/h vs truth "
          f"{truth_s_per_h:g} s/h ({(slope / truth_s_per_h - 1) * 100:+.1f} %)" if slope else
          f"drifting soak: flagged {'drift' in drifting['flags']}, itl_p50 not among the moved series")
    print(f"wall time {time.monotonic() - t0:.0f} s, {opts.parallel} soaks at once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
