"""--gpu-metrics end to end: a short run against the simulator while a tiny HTTP server in the test
plays a DCGM exporter, serving the fixture's two scrapes in turn (tests/fixtures/dcgm/README.md:
written from dcgm-exporter's documented format, not scraped from a GPU). The stage's energy is the
fixture's counter delta, its J/token that over the window's output tokens; a second URL that does
not answer is a warning naming it, and the run goes on."""

from __future__ import annotations

import csv
import socket
import threading

import pytest

from loadgen.server.gpu_window import ENERGY_MJ
from tests.integration.test_guard import serve
from tests.support.dcgm import dcgm_scrapes, dcgm_values
from tests.support.runlocust import fixed_sim, run_locust

pytestmark = pytest.mark.integration  # known answers from the fixture, no timing bound
sim = fixed_sim

# one 3 s stage; the GPU watch polls every 0.5 s while the window is open
RUN = ("--scenario", "config/smoke.yaml", "--output-tokens", "20", "--stages", "2", "--warmup", "1",
       "--stage-duration", "3", "--set", "guard.watch_interval_s=0.5")


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"  # nothing listens there now


def test_stage_energy_is_the_fixtures_delta_and_j_per_token_over_the_windows_tokens(tmp_path, sim):
    opened, closed = dcgm_scrapes()
    reads, lock = [], threading.Lock()

    def scrape():
        # the run's reads in order: the start's check, the window's open edge, then polls and the
        # close edge: the first two get the open scrape, every later one the close scrape
        with lock:
            reads.append(1)
            return 200, opened if len(reads) <= 2 else closed

    dead = closed_port_url()
    with serve({"/metrics": scrape}) as (url, _):
        run = run_locust(sim.url, tmp_path, *RUN, "--gpu-metrics", url + "/metrics", "--gpu-metrics", dead)
    assert run.code == 0, run.stderr[-3000:]
    assert f"warning: GPU metrics: GET {dead}: cannot connect" in run.stderr, run.stderr[-3000:]
    (stage,) = run.summary["stages"]
    gpu = stage["gpu"]
    delta_j = (sum(dcgm_values(closed, ENERGY_MJ)) - sum(dcgm_values(opened, ENERGY_MJ))) / 1000
    assert gpu["gpus"] == 8 and gpu["exporters"] == 1 and gpu["energy_source"] == "counter"
    assert gpu["energy_j"] == pytest.approx(delta_j)
    assert len(reads) > 3  # polls in the window, not only its edges
    window_tokens = stage["output_tokens_per_s"] * stage["window_s"]
    assert window_tokens > 0
    assert stage["joules_per_output_token"] == pytest.approx(delta_j / window_tokens)
    assert stage["kwh_per_million_output_tokens"] == pytest.approx(delta_j / window_tokens / 3.6)
    # each GPU's mean power lies between its two scrapes' values (the polls read the close scrape)
    power = list(zip(dcgm_values(opened, "DCGM_FI_DEV_POWER_USAGE"), dcgm_values(closed, "DCGM_FI_DEV_POWER_USAGE"), strict=True))
    assert sum(map(min, power)) <= gpu["power_w_total"] <= sum(map(max, power))
    assert gpu["fb_used_mib_max"] == max(dcgm_values(opened + closed, "DCGM_FI_DEV_FB_USED"))
    with open(run.run_dir / "stages.csv", newline="") as f:
        (row,) = csv.DictReader(f)
    assert float(row["gpu.energy_j"]) == pytest.approx(delta_j)
    assert float(row["joules_per_output_token"]) == pytest.approx(stage["joules_per_output_token"])
    assert "J per output tok" in (run.run_dir / "report.html").read_text()
    assert f"8 GPUs {gpu['power_w_total']:.0f} W" in run.stderr and " J/output tok" in run.stderr  # the console


def test_no_exporter_answering_is_a_warning_and_the_run_has_no_gpu_figures(tmp_path, sim):
    dead = closed_port_url()
    run = run_locust(sim.url, tmp_path, *RUN, "--gpu-metrics", dead)
    assert run.code == 0, run.stderr[-3000:]
    assert f"GPU metrics: GET {dead}" in run.stderr
    (stage,) = run.summary["stages"]
    assert "gpu" not in stage and stage["joules_per_output_token"] is None
