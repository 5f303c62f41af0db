"""A locust cluster on a network-namespace lab: the simulator, a master and workers, each on its own
"host" (tests/support/netns.py), with the witnesses the multi-host tests read (tests/integration/test_multihost.py).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from loadgen.stats.stage_stats import StageStats
from tests.support.merge_check import assert_exact_merge, from_workers, merged  # noqa: F401 (test_multihost imports them from here)
from tests.support.netns import Host, Lab, require_netns
from tests.support.runlocust import ROOT, run_dir

PY = sys.executable
SIM_PORT, MASTER_PORT = 8000, 5557
# 100 ms TTFT + 49 x 10 ms: 0.6 s requests; 2 processes on 2 cores keep up with a few dozen streams
SIM = ("--preset", "fixed", "--ttft-ms", "100", "--itl-ms", "10")
RUN = ("--scenario", "config/smoke.yaml", "--output-tokens", "50", "--warmup", "1")
SCRAPE = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())"


class Net:
    """One lab laid out as server, master and worker hosts; the processes of one run."""

    def __init__(self, lab: Lab, results: Path, workers: int):
        self.lab, self.results = lab, results
        self.server, self.master = lab.host("server"), lab.host("master")
        self.workers = [lab.host(f"w{i}") for i in range(workers)]
        self.url = f"http://{self.server.ip}:{SIM_PORT}"
        self.lines: list[tuple[float, str]] = []  # the master's stderr, each line with its arrival time
        self.master_proc: subprocess.Popen | None = None
        self.worker_procs: dict[str, subprocess.Popen] = {}
        self._ready(self.server, [PY, "-m", "loadgen.sim", *SIM, "--host", self.server.ip, "--port", str(SIM_PORT)],
                    "SIM_LISTENING")

    def _ready(self, host: Host, argv: list[str], marker: str) -> subprocess.Popen:
        proc = self.lab.popen(host, argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        line = proc.stdout.readline()
        if not line.startswith(marker):
            raise RuntimeError(f"{argv[:4]} in {host.ns} did not start (exit {proc.poll()}, said {line!r})")
        threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
        return proc

    def locust(self, host: Host, *args: str, locustfile: str = "locustfile.py", **kwargs) -> subprocess.Popen:
        return self.lab.popen(host, [PY, "-m", "locust", "--headless", "-f", str(ROOT / locustfile),
                                     "--host", self.url, "--loglevel", "WARNING", *args], cwd=ROOT, **kwargs)

    def start_master(self, expect_workers: int, *args: str) -> None:
        self.master_proc = self.locust(
            self.master, "--master", "--master-bind-host", self.master.ip, "--master-bind-port", str(MASTER_PORT),
            "--expect-workers", str(expect_workers), "--results-dir", str(self.results), *RUN, *args,
            stderr=subprocess.PIPE, text=True)

        def read(stream) -> None:
            for line in stream:
                self.lines.append((time.monotonic(), line.rstrip("\n")))

        threading.Thread(target=read, args=(self.master_proc.stderr,), daemon=True).start()

    def start_worker(self, host: Host, via_relay: bool = False, locustfile: str = "locustfile.py") -> subprocess.Popen:
        """A worker in ``host``; ``via_relay``: it dials the relay on its own 127.0.0.1."""
        target = "127.0.0.1" if via_relay else self.master.ip
        with (self.results.parent / f"worker-{host.name}.log").open("a") as log:  # the child keeps its own handle
            proc = self.locust(host, "--worker", "--master-host", target, "--master-port", str(MASTER_PORT),
                               "--loglevel", "INFO", locustfile=locustfile, stdout=log, stderr=subprocess.STDOUT)
        self.worker_procs[host.name] = proc
        return proc

    def worker_logs(self, tail_chars: int = 1500) -> str:
        """Each worker's output (stdout and stderr), its last ``tail_chars``: for a failure's message."""
        return "\n".join(f"--- {p.name} (exit {self.worker_procs[p.stem[7:]].poll()}):\n{p.read_text()[-tail_chars:]}"
                         for p in sorted(self.results.parent.glob("worker-*.log")))

    def relay(self, host: Host, delay_ms: float, jitter_ms: float, seed: int) -> Path:
        """The master's port, delayed, on ``host``'s 127.0.0.1; returns its phase log."""
        log = self.results.parent / f"phases-{host.name}.jsonl"
        self._ready(host, [PY, "-m", "tests.support.netlag", "relay", "--listen", f"127.0.0.1:{MASTER_PORT}",
                           "--connect", f"{self.master.ip}:{MASTER_PORT}", "--delay-ms", str(delay_ms),
                           "--jitter-ms", str(jitter_ms), "--seed", str(seed), "--log", str(log)], "NETLAG_READY")
        return log

    def tap(self, host: Host) -> Path:
        log = self.results.parent / f"sends-{host.name}.jsonl"
        self._ready(host, [PY, "-m", "tests.support.netlag", "tap", "--port", str(SIM_PORT), "--log", str(log)],
                    "NETLAG_READY")
        return log

    # -- watching --------------------------------------------------------------------------------------
    def wait_line(self, pattern: str, timeout_s: float = 60) -> float:
        """When the master printed a line matching ``pattern`` (waits for it)."""
        rx, deadline = re.compile(pattern), time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for t, line in list(self.lines):
                if rx.search(line):
                    return t
            if self.master_proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"the master never printed {pattern!r}; stderr:\n{self.stderr()[-3000:]}")

    def wait_after(self, pattern: str, seconds: float) -> float:
        """Wait until ``seconds`` after the master printed a line matching ``pattern``; that line's time."""
        t = self.wait_line(pattern)
        time.sleep(max(0.0, t + seconds - time.monotonic()))
        return t

    def wait_master(self, timeout_s: float = 120) -> int:
        code = self.master_proc.wait(timeout_s)
        time.sleep(0.2)  # the reader thread takes the last lines
        for proc in self.worker_procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                self.lab.kill(proc)
        return code

    def stderr(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def summary(self) -> dict:
        # the newest run folder: ``latest`` names only a run that measured a stage, and a run stopped
        # before its first window closed has none
        return json.loads((run_dir(self.results) / "summary.json").read_text())

    def ledgers(self) -> dict[str, StageStats]:
        """Each worker's own record of what it shipped, by client id."""
        out = {}
        for p in sorted((self.results / "workers").glob("*.json")):
            d = json.loads(p.read_text())
            out[d["client_id"]] = StageStats.from_message(d["totals"])
        return out

    def master_phase(self, exporter_port: int) -> tuple[int | None, str | None]:
        """(stage, phase) the master's exporter shows now (its ``--exporter-port``, on the master's
        own 127.0.0.1), (None, None) before it answers."""
        out = self.lab.run(self.master, [PY, "-c", SCRAPE, f"http://127.0.0.1:{exporter_port}/metrics"])
        stage = re.search(r"^llm_loadgen_stage\{[^}]*\} (\S+)$", out.stdout, re.M)
        phase = re.search(r'^llm_loadgen_phase\{[^}]*phase="(\w+)"[^}]*\} 1\.0$', out.stdout, re.M)
        if out.returncode != 0 or stage is None or phase is None:
            return None, None
        return int(float(stage.group(1))), phase.group(1)

    def wait_phase(self, exporter_port: int, stage: int, phase: str, timeout_s: float = 60) -> float:
        """Wait until the master is in ``phase`` of ``stage`` (its exporter, polled); when it was seen."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.master_proc.poll() is None:
            if self.master_phase(exporter_port) == (stage, phase):
                return time.monotonic()
            time.sleep(0.1)
        raise AssertionError(f"the master never showed stage {stage} {phase}; stderr:\n{self.stderr()[-3000:]}")

    def server_counters(self) -> dict[str, float]:
        """The simulator's own counters, scraped from inside the master's namespace."""
        out = self.lab.run(self.master, [PY, "-c", SCRAPE, self.url + "/metrics"])
        assert out.returncode == 0, out.stderr
        values = {}
        for line in out.stdout.splitlines():
            if line and not line.startswith("#"):
                values[line.split("{", 1)[0].split(" ", 1)[0]] = float(line.rsplit(" ", 1)[1])
        return {"completed": values["llmsim_requests_completed_total"],
                "started": values["vllm:time_to_first_token_seconds_count"],
                "prompt_tokens": values["vllm:prompt_tokens_total"],
                "generation_tokens": values["vllm:generation_tokens_total"]}


@contextmanager
def lab_net(results: Path, subnet: int, workers: int):
    """A ``Net`` on a fresh lab, always torn down (finalizer; ``atexit`` if the run is interrupted)."""
    require_netns()
    lab = Lab(subnet)
    try:
        yield Net(lab, results, workers)
    finally:
        lab.close()
    assert lab.leftovers() == [], f"namespaces left behind: {lab.leftovers()}"


def assert_server_agrees(summary: dict, server: dict) -> None:
    """Every request the server started was counted by the master: nothing vanished in between.

    Requests the client cut mid-flight (``cancelled_requests``: Locust moved their users) are the
    only slack: the server may or may not have started one (the POST can be cut before it is
    read), counts its prompt tokens, its last token may be in flight when the cut lands, and it
    may have finished at the server before the client read its end (once in a few hundred cuts on
    a busy machine: the server counted 407 completed, the client 406 ok and the cut one)."""
    t = summary["totals"]
    failed, cut = sum(t["errors"].values()), t.get("cancelled_requests", 0)
    per_prompt = summary["scenario"]["input_tokens"]
    assert t["requests"] <= server["completed"] <= t["requests"] + cut, (server, t)
    assert t["requests"] + failed <= server["started"] <= t["requests"] + failed + cut, (server, t)
    assert 0 <= server["prompt_tokens"] - t["input_tokens"] <= cut * per_prompt, (server, t)
    generated = t["output_tokens"] + t["failed_output_tokens"] + t.get("cancelled_output_tokens", 0)
    assert 0 <= server["generation_tokens"] - generated <= cut, (server, t)


def stage_users(summary: dict) -> list[tuple[int, int]]:
    return [(s["concurrency"], s["users"]) for s in summary["stages"]]
