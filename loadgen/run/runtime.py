"""Per-process run state and phase: what a Locust user of this process reads and writes.

Every process (local runner, master, worker) has one ``Runtime``, reachable from Locust users as
``environment.llm``. It holds the scenario, the ``Collector`` of request statistics, the current
phase, the client-health monitor, the API key and the model. It knows nothing of the run's
results (``loadgen.run.session``) nor of other processes (``loadgen.fleet.distributed``): those are told
what they need; ``on_fatal`` (set once by the plugin) carries the news that the target is unusable.

Stage membership (docs/development/ARCHITECTURE.md): the shape on the master owns the phase ``(stage, kind)``
and broadcasts it; a request belongs to stage k when it was sent during (k, MEASURE) as this
process knew it; tokens count toward stage k's throughput when they arrived during (k, MEASURE).
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import Callable

import gevent
from gevent.lock import Semaphore

from loadgen.config import ConfigError, Scenario, scenario_from_options
from loadgen.config.headers import secrets as header_secrets
from loadgen.phases import Phase
from loadgen.run.fail_fast import FailFast
from loadgen.run.health import HealthMonitor, settle_heap
from loadgen.run.request_export import RequestBuffer
from loadgen.server import start_check as preflight
from loadgen.stats.inflight import InflightMeter
from loadgen.stats.request_line import LOAD, request_fields
from loadgen.stats.stage_stats import Collector
from loadgen.wire import tls
from loadgen.wire.client import StreamClient
from loadgen.wire.compat import Compat
from loadgen.wire.replicas import Targets
from loadgen.workload.asks import DatasetCursor
from loadgen.workload.dataset import DatasetRequest, load_dataset, share
from loadgen.workload.trace import trace_scenario

log = logging.getLogger("llm_loadgen")


class Runtime:
    """The state one process needs to generate load and account for it."""

    def __init__(self, environment, scenario: Scenario):
        self.environment = environment
        self.dataset = scenario_dataset(scenario)
        self.scenario = trace_scenario(scenario, self.dataset)  # a timestamped dataset: one rate stage
        self._dataset_cursor: DatasetCursor | None = None  # this process's share (dataset_cursor)
        self.collector = Collector()
        self.stage: int | None = None  # stage index of the current phase
        self.stage_started_s = 0.0  # perf_counter when this process adopted the stage (its ramp)
        self.kind: Phase = Phase.IDLE
        self.phase_seq = 0
        self.measuring: int | None = None  # == stage while kind is MEASURE, else None
        self.measure_since_s = 0.0  # perf_counter when this process adopted the current window
        self.health = HealthMonitor(lambda: self.measuring)
        self.inflight = InflightMeter(self.collector)
        # open loop (loadgen.locust_face.open_loop): this stage's total rate and this process's share of it
        self.rate_per_s: float | None = None
        self.part: int | None = None  # None: no share this stage (joined late, or closed loop)
        self.parts = 1
        self._model: str | None = scenario.model
        self.targets = Targets(scenario)  # several replicas (loadgen.wire.replicas): where each request goes
        self._model_lock = Semaphore()
        self.api_key = api_key(scenario)
        self.any_ok = False  # a request of this process has completed: the server speaks OpenAI
        self.fatal_sent = False
        # What the server accepts (loadgen.wire.compat): set by the start check, or on a worker by the
        # master's phase message; users send nothing before it is known.
        self.compat: Compat | None = None
        self.connect_backoff = Backoff()  # one pause for every user of this process while connects fail
        self.fail_fast = FailFast()  # this process's first requests all refused the same way: stop
        # The target is unusable (one line): set once, by loadgen.locust_face.plugin, to the owner's
        # stop (Session.server_unusable) or, on a worker, to Fleet.tell_master.
        self.on_fatal: Callable[[str], None] = lambda message: log.error("llm-loadgen: %s", self.redact(message))
        # --requests-jsonl (loadgen.run.request_export): the owner's RequestFile (set by the session
        # once the run folder exists) or a worker's RequestBuffer; None: no per-request export
        self.request_sink = None
        self._request_numbers = itertools.count(1)
        self._slice_clock: gevent.Greenlet | None = None  # stages.slice_s: moves collector.slice on

    # -- Locust's test_start / test_stop (registered by loadgen.locust_face.plugin) -----------------
    def on_test_start(self, environment, **_) -> None:
        # A separately started worker saw default options at init; the master's arrive now.
        if self.is_worker:
            scenario = scenario_from_options(environment.parsed_options)
            self.dataset, self._dataset_cursor = scenario_dataset(scenario), None
            self.scenario = trace_scenario(scenario, self.dataset)
            self.use_model(self.scenario.model)
            self.targets = Targets(self.scenario)
            self.api_key = api_key(self.scenario)
            try:
                tls.configure(self.scenario.request.ca_cert, self.scenario.request.verify_tls)
            except ConfigError as exc:  # the master's file is not on this worker's machine
                self.fatal(f"config error on a worker: {exc}")
            self.request_sink = RequestBuffer() if self.scenario.requests_jsonl else None
        if not self.is_master:
            self.health.start()

    def on_test_stop(self, **_) -> None:
        self.health.stop()

    # -- dataset ---------------------------------------------------------------------------------
    def dataset_share(self) -> tuple[int, int]:
        """(this process's index, load processes): a worker's index of the master's --expect-workers
        (relayed with the options), a local run (0, 1)."""
        if not self.is_worker:
            return 0, 1
        parts = int(getattr(self.environment.parsed_options, "expect_workers", 1) or 1)
        return int(self.environment.runner.worker_index or 0) % parts, parts

    def dataset_cursor(self) -> DatasetCursor | None:
        """This process's share of the dataset (one cursor for all its senders), or None (synthetic)."""
        if self.dataset is None:
            return None
        if self._dataset_cursor is None:
            sc = self.scenario
            part, parts = self.dataset_share()
            self._dataset_cursor = DatasetCursor(share(self.dataset, part, parts,
                                                       sc.workload.dataset_order == "shuffled", sc.prompt.seed))
        return self._dataset_cursor

    # -- role ------------------------------------------------------------------------------------
    @property
    def is_worker(self) -> bool:
        from locust.runners import WorkerRunner

        return isinstance(self.environment.runner, WorkerRunner)

    @property
    def is_master(self) -> bool:
        from locust.runners import MasterRunner

        return isinstance(self.environment.runner, MasterRunner)

    @property
    def process_name(self) -> str:
        """This process in the per-request export: a worker's client id, "master" or "local"."""
        if self.is_worker:
            return str(self.environment.runner.client_id)
        return "master" if self.is_master else "local"

    def export_request(self, result, stage: int | None, input_tokens_asked: int | None, *, phase: str = LOAD,
                       sent_unix_s: float | None = None, turn: int | None = None, model: str | None = None,
                       replica: str | None = None) -> None:
        """One ended request (ok or failed) into the per-request export, when it is on.
        ``sent_unix_s``: wall-clock send time (default: now - its E2E); ``model``: with a mix of models;
        ``replica``: with several replicas."""
        if self.request_sink is None:
            return
        if sent_unix_s is None:
            sent_unix_s = time.time() - (result.e2e_s or 0.0)
        self.request_sink.add(request_fields(result, stage=stage, phase=phase, worker=self.process_name,
                                             n=next(self._request_numbers), sent_unix_s=sent_unix_s,
                                             input_tokens_asked=input_tokens_asked, turn=turn, model=model,
                                             replica=replica))

    # -- phase -----------------------------------------------------------------------------------
    def set_phase(self, stage: int | None, kind: str, seq: int | None = None) -> None:
        """Adopt a phase (locally, or from the master's message). Older messages are ignored."""
        if seq is None:
            self.phase_seq += 1
        elif seq <= self.phase_seq:
            return
        else:
            self.phase_seq = seq
        if stage != self.stage:  # open loop: the stage's arrivals are due from here (open_loop.RateUser)
            self.stage_started_s = time.perf_counter()
        self.stage, self.kind = stage, Phase(kind)
        if self.kind is Phase.WARMUP:
            settle_heap()
        self.measuring = stage if self.kind is Phase.MEASURE else None
        if self.measuring is not None:
            self.measure_since_s = time.perf_counter()
        self.inflight.measure(self.measuring, time.perf_counter())
        self._slices(self.measuring)

    def measured_stage(self, due_s: float) -> int | None:
        """Open loop: the stage an arrival due at ``due_s`` (perf_counter) is measured in: the window
        open now, if it was open by then. An arrival that came due before the window opened and was
        sent after (the dispatcher late: a stall of the process) belongs to the warmup, as its
        schedule says, not to the window; one due inside but sent after the close is not measured."""
        return self.measuring if self.measuring is not None and due_s >= self.measure_since_s else None

    def _slices(self, stage: int | None) -> None:
        """Time slices (``stages.slice_s``): from now, slice j of ``stage`` is open during
        [now + j x slice_s, now + (j+1) x slice_s) as this process's clock says (a worker's slices
        start when it adopts the window, a phase message's trip later than the master's)."""
        if self._slice_clock is not None:
            self._slice_clock.kill(block=False)
            self._slice_clock = None
        self.collector.slice = None
        slice_s = self.scenario.stages.slice_s
        if stage is not None and slice_s:
            self.collector.slice = (stage, 0)
            self._slice_clock = gevent.spawn(self._run_slices, stage, time.perf_counter(), slice_s)

    def _run_slices(self, stage: int, t0: float, slice_s: float) -> None:
        j = 0
        while True:
            j += 1
            gevent.sleep(max(0.0, t0 + j * slice_s - time.perf_counter()))
            self.collector.slice = (stage, j)

    def set_arrivals(self, rate_per_s: float | None, part: int | None, parts: int) -> None:
        """Open loop: the stage's offered rate and this process's part of ``parts`` (or None)."""
        self.rate_per_s, self.part, self.parts = rate_per_s, part, max(parts, 1)

    def request_started(self, stage: int | None) -> None:
        """A request of ``stage`` (None: not measured) was sent by this process."""
        self.collector.request_started(stage)
        self.inflight.change(+1, time.perf_counter())

    def request_finished(self, stage: int | None, ok: bool, model: str | None = None,
                         replica: str | None = None) -> None:
        """It finished (``ok``: completed); an ok one counts toward the window open now (and its
        ``model``'s, with a mix of models, its ``replica``'s with several replicas)."""
        self.collector.request_finished(stage)
        self.inflight.change(-1, time.perf_counter())
        if ok:
            self.collector.add_window_request(self.measuring, model, replica)

    def on_tokens(self, n: int, model: str | None = None, replica: str | None = None) -> None:
        """Live token arrival: counts toward the window of the stage being measured (and its
        ``model``'s, with a mix of models, its ``replica``'s with several replicas)."""
        self.collector.add_window_tokens(self.measuring, n, model, replica)

    def finished(self, stage: int) -> int:
        """Measured requests of ``stage`` that have finished (ok or failed), as merged so far."""
        stats = self.collector.stages.get(stage)
        return 0 if stats is None else stats.requests_ok + stats.error_count

    def finished_total(self) -> int:
        """Every request finished so far in the run (ok or failed, measured or not)."""
        t = self.collector.totals
        return t.requests_ok + t.error_count

    # -- the target ------------------------------------------------------------------------------------
    def fatal(self, problem: Exception | str) -> None:
        """The target cannot be load-tested: hand the one line to ``on_fatal`` (the run stops,
        exit code 4). Once per process: every user meets the same problem, one line says it."""
        if self.fatal_sent:
            return
        self.fatal_sent = True
        self.on_fatal(str(problem))

    def redact(self, text: str) -> str:
        """``text`` without the API key and the values of credential headers (``--header``,
        ``loadgen.config.headers.is_credential``): a server may echo them back in an error message."""
        if self.api_key:
            text = text.replace(self.api_key, "<API key>")
        for value, placeholder in header_secrets(self.scenario.request.headers):
            text = text.replace(value, placeholder)
        return text

    def stream_client(self, host: str) -> StreamClient:
        """A client to the server under test as every sender of this process needs it: the API
        key, the scenario's headers and request timeouts."""
        req = self.scenario.request
        return StreamClient(host, api_key=self.api_key, headers=req.headers,
                            connect_timeout_s=req.connect_timeout_s, read_timeout_s=req.read_timeout_s,
                            upstream_header=self.targets.upstream_header)

    def use_model(self, model: str | None) -> None:
        """The model the start check settled on (given, or discovered once for this process)."""
        self._model = model

    @property
    def model_name(self) -> str | None:
        """The model known so far (None before discovery)."""
        return self._model

    def model(self, client) -> str:
        """The model to send: set by the start check, else discovered on first use (a worker)."""
        if self._model is None:
            with self._model_lock:
                if self._model is None:
                    self._model = preflight.discover_model(client)
        return self._model


def scenario_dataset(scenario) -> list[DatasetRequest] | None:
    """Every request of ``workload.dataset`` (validated: DatasetError, exit 2), or None."""
    path = scenario.workload.dataset
    return None if path is None else load_dataset(path, scenario.endpoint)


class Backoff:
    """The pause after a failed connect, shared by every user of one process: it doubles from
    ``first_s`` to ``max_s`` with each failure anywhere in the process and resets on a success,
    so a down server sees a few connects a second from a process, not one per user per pause."""

    def __init__(self, first_s: float = 0.05, max_s: float = 1.0):
        self.first_s, self.max_s, self.pause_s = first_s, max_s, 0.0

    def failed(self) -> float:
        self.pause_s = min(max(2 * self.pause_s, self.first_s), self.max_s)
        return self.pause_s

    def reset(self) -> None:
        self.pause_s = 0.0


def api_key(scenario) -> str | None:
    """The key from the environment variable the scenario names (``api_key_env``; null: no key)."""
    return (os.environ.get(scenario.api_key_env) or None) if scenario.api_key_env else None


def install(environment) -> Runtime:
    """Create this process's Runtime from the parsed options (``environment.llm``); its Locust
    hooks (``on_test_start``, ``on_test_stop``) are registered by ``loadgen.locust_face.plugin``."""
    rt = Runtime(environment, scenario_from_options(environment.parsed_options))
    hosts = rt.scenario.hosts
    if hosts and environment.host and environment.host not in hosts:
        raise ConfigError("hosts", list(hosts), f"and --host {environment.host} are both given",
                          "list every replica either as --host (repeated) or under hosts:, not both")
    if hosts and not environment.host:  # hosts: in the scenario: Locust needs one host
        environment.host = hosts[0]
    tls.configure(rt.scenario.request.ca_cert, rt.scenario.request.verify_tls)  # a bad file: ConfigError
    environment.llm = rt
    return rt
