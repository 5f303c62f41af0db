"""The client's and the server's clocks side by side, end to end on the simulator (issue 28):
queueing named as the cause of a stage's TTFT growth, and a network delay put where it belongs."""

from __future__ import annotations

import subprocess
import sys
from contextlib import contextmanager

import pytest

from loadgen.sim.launch import running_sim
from tests.support.netlag import READY
from tests.support.ports import free_port
from tests.support.procs import stop_process
from tests.support.runlocust import ROOT, run_locust

pytestmark = [pytest.mark.integration, pytest.mark.solo]  # timed against known answers (and the client's own lag): alone



@contextmanager
def relay(to_url: str, delay_ms: float):
    """tests/support/netlag.py's relay in front of ``to_url``: every byte, each way, ``delay_ms`` late."""
    port = free_port()
    target = to_url.split("//", 1)[1].rstrip("/")
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.netlag", "relay", "--listen", f"127.0.0.1:{port}",
                             "--connect", target, "--delay-ms", str(delay_ms)],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == READY
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc)


def test_a_sweep_whose_ttft_grows_from_queueing_says_so(tmp_path):
    """Four requests decode at once (--max-running 4), each 40 steps of 10 ms. At C=4 nobody waits;
    at C=16 a closed loop keeps 12 waiting, so by Little's law (16 in the system, 4 served at a time)
    each request waits 3 service times: queue mean = 3 x (prefill + decode) mean. The TTFT growth is
    that queue time: the diagnosis names it. Once the first requests have turned over (the warmup
    lasts until C = 16 finished: 1.6 s at 10 a second) every request waits those 3 services, so a
    2 s window's 20 requests give the same mean as a longer one."""
    engine = ("--timing", "engine", "--flavor", "vllm", "--max-running", "4", "--step-base-ms", "10",
              "--step-per-seq-ms", "0", "--step-per-prefill-token-us", "0", "--time-scale", "1")
    with running_sim(*engine) as sim:
        run = run_locust(sim.url, tmp_path / "queue", "--scenario", "config/smoke.yaml", "--input-tokens", "16",
                         "--output-tokens", "40", "--stages", "4,16", "--warmup", "1", "--stage-duration", "2",
                         "--set", "guard.over_capacity_queue_fraction=100")
    assert run.code == 0, run.stderr[-3000:]
    low, high = run.summary["stages"]
    for st in (low, high):
        ttft = st["breakdown"]["ttft"]
        assert ttft["server_count"] > 0 and ttft["network_client_mean_s"] < 0.05, st["breakdown"]
    service = high["breakdown"]["e2e"]["prefill_mean_s"] + high["breakdown"]["e2e"]["decode_mean_s"]
    assert high["breakdown"]["ttft"]["queue_mean_s"] == pytest.approx(3 * service, rel=0.2), high["breakdown"]
    assert low["breakdown"]["ttft"]["queue_mean_s"] < 0.02
    diagnosis = high["breakdown"]["diagnosis"]
    assert diagnosis.startswith("C=16: TTFT mean +") and "of it server queue time" in diagnosis, diagnosis
    assert f"llm-loadgen: stage 1 {diagnosis}" in run.stderr
    assert "clocks_disagree" not in low["flags"] + high["flags"]
    csv_head = (run.run_dir / "stages.csv").read_text().splitlines()[0]
    assert "breakdown.ttft.queue_mean_s" in csv_head and "server.ttft.p99_s" in csv_head


@contextmanager
def delayed_server(how: str, delay_ms: float):
    """The fixed simulator (TTFT 200 ms) behind a delay: tests/support/netlag.py's relay (each way), or
    the simulator's own --network-delay-ms (its writes only)."""
    if how == "relay":
        with running_sim("--preset", "fixed") as sim, relay(sim.url, delay_ms) as url:
            yield url
    else:
        with running_sim("--preset", "fixed", "--network-delay-ms", str(delay_ms)) as sim:
            yield sim.url


@pytest.mark.parametrize(("how", "ways"), [("relay", 2), ("sim", 1)])
def test_a_network_delay_goes_to_network_and_client_within_10_percent(tmp_path, how, ways):
    """Every byte held d = 50 ms: through the relay the request reaches the server d late and its
    first token comes back d late (2 d); the simulator's own option holds only its writes (d). Network
    + client grows by that (against the same path at 0 ms, which cancels the path's own cost), the
    server's clocks do not move, and the stage is flagged with the network as the likely cause.
    The 4 users run in step (one cohort of 4 requests every ~0.36 s with 4 output tokens): the server's
    window counts the first tokens inside it, the client's the requests sent inside it, and a cohort
    sent before the window opened but first served after it is the server's alone (the flag needs the
    two counts within 10 %, breakdown.populations_agree); 4 s hold ~11 cohorts, so one cohort apart
    at an edge still agrees, wherever the window's edges fall in the cohorts' cycle."""
    delay_ms, gaps, rows = 50, {}, {}
    for d in (0, delay_ms):
        with delayed_server(how, d) as url:
            run = run_locust(url, tmp_path / f"d{d}", "--scenario", "config/smoke.yaml", "--stages", "4",
                             "--output-tokens", "4", "--warmup", "1", "--stage-duration", "4")
        assert run.code == 0, run.stderr[-3000:]
        rows[d] = (st := run.summary["stages"][0])
        gaps[d] = st["breakdown"]["ttft"]["network_client_mean_s"], st["breakdown"]["e2e"]["network_client_mean_s"]
    for metric in (0, 1):
        assert gaps[delay_ms][metric] - gaps[0][metric] == pytest.approx(ways * delay_ms / 1000, rel=0.1), gaps
    server_ttft = [rows[d]["breakdown"]["ttft"]["server_mean_s"] for d in (0, delay_ms)]
    assert server_ttft[1] == pytest.approx(server_ttft[0], abs=0.005)  # the fixed 200 ms, on the server's clock
    assert "clocks_disagree" not in rows[0]["flags"]
    if ways * delay_ms > 50:  # over the 50 ms network allowance: flagged, and said why
        assert "clocks_disagree" in rows[delay_ms]["flags"]
        assert "network or a proxy" in rows[delay_ms]["breakdown"]["disagreement"]["likely_cause"]
