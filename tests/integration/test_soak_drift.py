"""Known answer for the drift verdict (docs/soak.md): a simulator whose decode slows by a known rate
per simulated hour, run 60x faster than wall time, gives the ITL p50 slope within 15 % of the truth
(ITL p99 moves too, but the client's event-loop jitter blurs its slope over 20 s: not a known answer);
the same simulator without drift gives no flag.

In wall units: ITL(t) = itl_ms / time_scale x (1 + r x t x time_scale / 3600) for t wall seconds since
the simulator started, so its slope per wall hour is itl_ms x r (here 0.6 s x 3 = 1.8 s/h). The
thresholds are the defaults per simulated hour (THRESHOLDS), so a 20 s window means what 20
simulated minutes would; drift.alpha 0.001.
Output lengths vary (25-75 tokens) so the users do not run in step: in step, the server's KV use is a
sawtooth of one request's period, and polls 1 s apart alias it into a slow false trend.

The two soaks run side by side (each its own simulator and locust run, started together in
threads): each sees the other as a steady neighbour for its whole 20 s, which moves no trend; what
the file needs alone is that no neighbour comes or goes during the window.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields

import pytest

from loadgen.sim.launch import running_sim
from loadgen.stats.drift import DriftConfig
from tests.support.runlocust import SMOKE, run_locust

# alone: a solo neighbour that starts or ends during the 20 s window is a step in the client's
# timing that the trend test reads as drift (seen with two solo files at a time: a steady soak flagged)
pytestmark = [pytest.mark.integration, pytest.mark.solo, pytest.mark.alone]

TIME_SCALE, ITL_MS, DRIFT_PCT_PER_H = 60, 600, 300  # wall ITL 10 ms growing to ~25 ms over the run
# The thresholds per hour of the simulated server's time (the defaults), in wall units: a rate per
# hour x TIME_SCALE, a per-minute rate per hour x TIME_SCALE^2. With the defaults per wall hour any
# significant trend over 20 s was "fast", so the steady run's verdict was the trend test's alone:
# its KV use rose by 0.0003 in one run (p < 0.001, correlated slices) and flagged drift.
THRESHOLDS = {f.name: getattr(DriftConfig(), f.name) * TIME_SCALE ** (2 if f.name.endswith("_per_min_per_h") else 1)
              for f in fields(DriftConfig) if f.name.endswith("_per_h")}
RUN = (*SMOKE, "--stages", "8", "--output-tokens", "50", "--output-dist", "uniform", "--output-min", "25", "--output-max",
       "75", "--stage-duration", "20", "--slice-s", "1",
       "--set", "drift.alpha=0.001", *(a for name, value in THRESHOLDS.items() for a in ("--set", f"drift.{name}={value:g}")))


def soak(tmp_path, *sim_args: str) -> dict:
    """One soak's only stage."""
    with running_sim("--preset", "fixed", "--ttft-ms", "1200", "--itl-ms", str(ITL_MS), "--time-scale",
                     str(TIME_SCALE), *sim_args) as sim:
        run = run_locust(sim.url, tmp_path, *RUN, timeout_s=120)
    assert run.code == 0, run.stderr[-3000:]
    (stage,) = run.summary["stages"]
    assert len(run.summary["slices"]) >= 20
    return stage


@pytest.fixture(scope="module")
def soaks(tmp_path_factory):
    """{"drifting": future, "steady": future}: both soaks, started together at the first test."""
    with ThreadPoolExecutor(2) as pool:
        yield {"drifting": pool.submit(soak, tmp_path_factory.mktemp("drifting"), "--drift-decode-pct-per-h",
                                       str(DRIFT_PCT_PER_H)),
               "steady": pool.submit(soak, tmp_path_factory.mktemp("steady"))}


def test_a_decode_slowing_by_a_known_rate_is_flagged_with_its_slope(soaks):
    stage = soaks["drifting"].result()
    truth_s_per_h = ITL_MS / 1000 * DRIFT_PCT_PER_H / 100
    moved = {m["series"]: m for m in stage["drift"]["moved"]}
    assert "drift" in stage["flags"] and "itl_p50" in moved, stage["drift"]
    assert moved["itl_p50"]["slope_per_h"] == pytest.approx(truth_s_per_h, rel=0.15), moved["itl_p50"]
    assert "throughput" in moved and moved["throughput"]["slope_per_h"] < 0  # slower decode: fewer tok/s


def test_a_steady_simulator_carries_no_drift_flag(soaks):
    stage = soaks["steady"].result()
    assert stage["drift"]["drift"] is False and "drift" not in stage["flags"], (stage["drift"]["moved"], stage["drift"])
