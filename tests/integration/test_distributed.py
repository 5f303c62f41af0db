"""Master + 2 workers (real processes on 127.0.0.1) against the simulator."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest

from loadgen.sim.launch import running_sim
from tests.support.merge_check import assert_exact_merge, merged, worker_ledgers
from tests.support.ports import free_port
from tests.support.runlocust import ROOT, locust_cmd, run_dir

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SIM = ("--preset", "fixed", "--ttft-ms", "100", "--itl-ms", "10")
RUN = ("--scenario", "config/smoke.yaml", "--output-tokens", "50", "--stages", "2,4,8",
       "--warmup", "1", "--stage-duration", "5", "--slo", "ttft_s=0.5,tpot_s=0.05")



class Cluster:
    """A master and N workers; every process is killed at exit. The master's stderr is read as it
    comes (``lines``: each line with its arrival time), so a test can act on what it printed."""

    def __init__(self, stack: ExitStack, host: str, results: Path, n_workers: int, *args: str,
                 worker_locustfile: str = "locustfile.py", worker_env: dict | None = None):
        port = free_port()
        self.master = subprocess.Popen(
            locust_cmd(host, "--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
                       "--expect-workers", str(n_workers), "--results-dir", str(results), *args),
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        stack.callback(self._kill, self.master)
        self.lines: list[tuple[float, str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.workers = []
        for _ in range(n_workers):
            cmd = locust_cmd(host, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port))
            cmd[cmd.index(str(ROOT / "locustfile.py"))] = str(ROOT / worker_locustfile)
            w = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 env={**os.environ, **(worker_env or {})})
            stack.callback(self._kill, w)
            self.workers.append(w)

    def _read(self) -> None:
        for line in self.master.stderr:
            self.lines.append((time.monotonic(), line))

    @staticmethod
    def _kill(p: subprocess.Popen) -> None:
        if p.poll() is None:
            p.kill()
            p.wait()

    def stderr(self) -> str:
        return "".join(line for _, line in self.lines)

    def wait_line(self, pattern: str, timeout_s: float = 60) -> float:
        """When (``time.monotonic``) the master printed a line matching ``pattern`` (waits for it)."""
        rx, deadline = re.compile(pattern), time.monotonic() + timeout_s
        while time.monotonic() < deadline and (self.master.poll() is None or self._reader.is_alive()):
            if found := next((t for t, line in list(self.lines) if rx.search(line)), None):
                return found
            time.sleep(0.05)
        raise AssertionError(f"the master never printed {pattern!r}; stderr:\n{self.stderr()[-3000:]}")

    def wait(self, timeout_s: float = 150) -> tuple[int, str]:
        self.master.wait(timeout_s)
        self._reader.join(10)
        for w in self.workers:
            try:
                w.wait(15)
            except subprocess.TimeoutExpired:
                w.kill()
        return self.master.returncode, self.stderr()


@pytest.fixture(scope="module")
def runs(tmp_path_factory, beside):
    """One distributed and one local run of the same scenario against the same simulator, side by
    side: the fixed timing model serves every request on its own schedule, whatever else runs.
    (``beside``, asked for first, runs two more beside them.)"""
    tmp = tmp_path_factory.mktemp("dist")
    with ExitStack() as stack:
        sim = stack.enter_context(running_sim(*SIM))
        cluster = Cluster(stack, sim.url, tmp / "dist", 2, *RUN)
        local = subprocess.Popen(locust_cmd(sim.url, "--results-dir", str(tmp / "local"), *RUN), cwd=ROOT,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        stack.callback(Cluster._kill, local)
        code, err = cluster.wait()
        assert code == 0, err[-3000:]
        _, local_err = local.communicate(timeout=60)
        assert local.returncode == 0, local_err[-3000:]
    dist = json.loads((run_dir(tmp / "dist") / "summary.json").read_text())
    return dist, json.loads((run_dir(tmp / "local") / "summary.json").read_text()), tmp / "dist"


def test_users_per_stage_equal_the_target_across_workers(runs):
    dist, _, _ = runs
    assert dist["run"]["workers"] == 2
    assert [s["concurrency"] for s in dist["stages"]] == [2, 4, 8]
    assert [s["users"] for s in dist["stages"]] == [2, 4, 8]
    assert all(s["requests"] > 0 and s["error_count"] == 0 for s in dist["stages"])


def test_master_totals_equal_the_sum_of_every_worker(runs):
    dist, _, results = runs
    parts = worker_ledgers(results)
    assert len(parts) == 2 and all(p.requests_ok > 0 for p in parts)  # both workers did work
    # the master's own start-check probe is the only part no worker sent: summary.json's preflight
    pre = dist["preflight"]
    assert pre["probes"] == ["ok"] and pre["requests"] == 1
    assert_exact_merge(dist, merged(parts))


def late_s(*rows: dict) -> float:
    """How late the worst of the runs' load-generating processes ran its event loop in the stage
    (loop-lag p99, the client's own health figure): a chunk it read late is late by up to that much."""
    return max(row["client"].get("loop_lag_p99_s") or 0.0 for row in rows)


def test_distributed_stages_match_a_local_run(runs):
    """The same sweep on the same fixed simulator, run by one process and by a master and two workers
    at the same time, gives the same figures: within 10 % (15 % for tok/s), plus what each client's
    own measured lateness adds (both runs share two cores; one starved process reads its chunks late:
    a 100 ms TTFT read as 153 ms on a loaded machine)."""
    dist, local, _ = runs
    for d, loc in zip(dist["stages"], local["stages"], strict=True):
        assert d["concurrency"] == loc["concurrency"]
        late = late_s(d, loc)
        assert abs(d["ttft_p50_s"] - loc["ttft_p50_s"]) <= 0.10 * loc["ttft_p50_s"] + late, late
        assert abs(d["itl_p50_s"] - loc["itl_p50_s"]) <= 0.10 * loc["itl_p50_s"] + late, late
        e2e = min(d["e2e_p50_s"], loc["e2e_p50_s"])  # tok/s = C x tokens / E2E: lateness stretches E2E
        assert d["output_tokens_per_s"] == pytest.approx(loc["output_tokens_per_s"], rel=0.15 + late / e2e), late


def test_distributed_slo_attainment_and_goodput_are_merged_counts_and_match_a_local_run(runs):
    """The fixed sim (TTFT 100 ms, 10 ms per token) meets both objectives: every request counts."""
    dist, local, results = runs
    total = merged(worker_ledgers(results))
    slo = dist["totals"]["slo"]  # the master's counts are exactly the sum of the workers' shipments
    assert (slo["judged_requests"], slo["met_requests"], slo["met_output_tokens"]) == (
        total.slo.judged, total.slo.met, total.slo.met_output_tokens)
    # every request the workers sent was judged; the start check's probes (no worker's) are not
    pre = dist["preflight"]
    sent = dist["totals"]["requests"] + sum(dist["totals"]["errors"].values()) - pre["requests"] - sum(pre["errors"].values())
    assert slo["met_by"] == total.slo.met_by and slo["judged_requests"] == sent
    for d, loc in zip(dist["stages"], local["stages"], strict=True):
        for s in (d, loc):
            assert s["slo"]["pass"] and s["slo"]["attainment"] == s["slo_attainment"] == 1.0
            assert s["slo"]["met_requests"] == s["requests"] + s["error_count"]
            assert s["goodput_requests_per_s"] == s["slo"]["goodput_requests_per_s"]
            assert s["goodput_output_tokens_per_s"] == pytest.approx(s["output_tokens_per_s"])  # all conform
            assert s["goodput_requests_per_s"] == pytest.approx(s["output_tokens_per_s"] / 50)
            assert s["slo"]["attainment_by"] == {"ttft_s": 1.0, "tpot_s": 1.0}
        assert d["goodput_requests_per_s"] == pytest.approx(loc["goodput_requests_per_s"], rel=0.15)
        assert d["goodput_output_tokens_per_s"] == pytest.approx(loc["goodput_output_tokens_per_s"], rel=0.15)
    assert dist["slo"]["max_concurrency"] == local["slo"]["max_concurrency"] == 8
    assert dist["slo"]["bracket"] == local["slo"]["bracket"] == [8, None]


def kill_a_worker_mid_stage(results: Path) -> tuple[dict, str]:
    """A run of 2 workers, one SIGKILLed inside stage 0's window: (summary.json, master stderr)."""
    with ExitStack() as stack:
        sim = stack.enter_context(running_sim(*SIM))
        cluster = Cluster(stack, sim.url, results, 2, "--scenario", "config/smoke.yaml",
                          "--output-tokens", "50", "--stages", "4,8", "--warmup", "1",
                          "--stage-duration", "6")
        # stage 0 ramps once both workers are in, warms up (1-2 s), is measured (6 s): kill inside it
        ramp_t = cluster.wait_line(r"stage 0 C=4: ramp")
        time.sleep(max(0.0, ramp_t + 3 - time.monotonic()))
        os.kill(cluster.workers[0].pid, signal.SIGKILL)
        _, err = cluster.wait()
    return json.loads((run_dir(results) / "summary.json").read_text()), err


def count_parser_builds(tmp: Path) -> dict:
    """A 5 s ramp to 8 users on one worker that counts its argument-parser builds
    (tests/fixtures/parser_count_locustfile.py)."""
    counts = tmp / "parser_builds"
    with ExitStack() as stack:
        sim = stack.enter_context(running_sim(*SIM))
        code, err = Cluster(stack, sim.url, tmp / "results", 1, "--scenario", "config/smoke.yaml",
                            "--output-tokens", "50", "--warmup", "1", "--stages", "8", "--stage-duration", "2",
                            "--ramp", "5", worker_locustfile="tests/fixtures/parser_count_locustfile.py",
                            worker_env={"LLM_TEST_PARSER_COUNT_DIR": str(counts)}).wait(90)
    return {"code": code, "stderr": err, "counts": [json.loads(p.read_text())["count"] for p in counts.glob("*.json")]}


@pytest.fixture(scope="module")
def beside(tmp_path_factory):
    """The runs that go on beside ``runs`` (which asks for this first), one after the other in a
    thread, each on its own simulator: {"killed": future of ``kill_a_worker_mid_stage``,
    "parser": future of ``count_parser_builds``}."""
    with ThreadPoolExecutor(1) as pool:
        yield {"killed": pool.submit(kill_a_worker_mid_stage, tmp_path_factory.mktemp("killed") / "killed"),
               "parser": pool.submit(count_parser_builds, tmp_path_factory.mktemp("parser"))}


def test_killing_a_worker_mid_stage_still_writes_a_complete_summary(beside):
    summary, err = beside["killed"].result(timeout=200)
    assert summary["run"]["ended_at"] is not None
    (loss,) = summary["run"]["worker_losses"]
    assert loss["stage"] in (0, 1) and loss["concurrency"] in (4, 8)
    assert [s["concurrency"] for s in summary["stages"]] == [4, 8]
    assert "lost during stage" in err


# -- a ramp on one worker ---------------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_a_ramp_does_not_rebuild_the_option_parser_for_every_spawn_message(beside):
    """Locust 2.47's WorkerRunner filters the master's options with ``default_args_dict()`` once per
    option of every spawn message, each call a whole new parser; loadgen.locust_face.plugin builds it once
    (8 workers with --ramp 10 missed their heartbeats in 6 of 6 tries before)."""
    ran = beside["parser"].result(timeout=110)
    assert ran["code"] == 0, ran["stderr"][-3000:]
    (count,) = ran["counts"]
    # starting up builds it a few times; a 5 s ramp is ~5 spawn messages x ~76 options: hundreds
    assert count <= 10, f"the worker built Locust's argument parser {count} times"
