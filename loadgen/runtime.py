"""Per-process run state and its wiring into Locust's events.

Every process (local runner, master, worker) has one ``Runtime``, reachable from Locust users as
``environment.llm``. It holds the scenario, the ``Collector`` of request statistics, the current
phase, and the client-health monitor.

Stage membership (docs/ARCHITECTURE.md): the shape on the master owns the phase ``(stage, kind)``
and broadcasts it (message ``llm_phase``, re-sent on every tick so late-joining workers catch up).
A request belongs to stage k when it was sent during (k, "measure") as this process knew it; tokens
count toward stage k's throughput when they arrived during (k, "measure").

Workers ship deltas (request stats, health, in-flight counts) on Locust's report cycle
(``report_to_master``, every 3 s and once when they quit); the master merges them
(``worker_report``), so master totals are exactly the sum of every worker's samples.
"""

from __future__ import annotations

import logging
import os

from gevent.lock import Semaphore

from loadgen.config import Scenario, scenario_from_options
from loadgen.health import HealthMonitor, StageHealth, worst_of
from loadgen.stats import Collector, StageStats

log = logging.getLogger("llm_loadgen")

PHASE_MESSAGE = "llm_phase"
FATAL_MESSAGE = "llm_fatal"  # worker -> master: this target cannot be load-tested
MEASURE = "measure"


class Runtime:
    """The state one process needs to generate load and account for it."""

    def __init__(self, environment, scenario: Scenario):
        self.environment = environment
        self.scenario = scenario
        self.collector = Collector()
        self.stage: int | None = None  # stage index of the current phase
        self.kind: str = "idle"  # idle | ramp | warmup | measure | drain | done
        self.phase_seq = 0
        self.measuring: int | None = None  # == stage while kind == "measure", else None
        self.health = HealthMonitor(lambda: self.measuring)
        # Master only: per-worker in-flight (absolute, from the latest report) and phase seq.
        self.worker_inflight: dict[str, dict] = {}
        self.worker_phase_seq: dict[str, int] = {}
        self.worker_health_now: dict[str, list] = {}  # [cpu %, loop lag s] from the latest report
        self.health_by_stage: dict[int | None, dict[str, StageHealth]] = {}
        self._model: str | None = scenario.model
        self._model_lock = Semaphore()
        self.api_key = api_key(scenario)
        self.session = None  # loadgen.session.Session on the process that owns the run
        self.ledger = StageStats()  # worker: every total shipped to the master
        self.workers_seen: set[str] = set()
        self.any_ok = False  # a request of this process has completed: the server speaks OpenAI
        self.fatal_sent = False
        self.cancelled: dict[int | None, int] = {}  # requests killed mid-flight by stage (this process)

    # -- role ------------------------------------------------------------------------------------
    @property
    def is_worker(self) -> bool:
        from locust.runners import WorkerRunner

        return isinstance(self.environment.runner, WorkerRunner)

    @property
    def is_master(self) -> bool:
        from locust.runners import MasterRunner

        return isinstance(self.environment.runner, MasterRunner)

    # -- phase -----------------------------------------------------------------------------------
    def set_phase(self, stage: int | None, kind: str, seq: int | None = None) -> None:
        """Adopt a phase (locally, or from the master's message). Older messages are ignored."""
        if seq is None:
            self.phase_seq += 1
        elif seq <= self.phase_seq:
            return
        else:
            self.phase_seq = seq
        self.stage, self.kind = stage, kind
        self.measuring = stage if kind == MEASURE else None

    def broadcast_phase(self) -> None:
        """Master: send the current phase to every worker (idempotent; workers drop old seqs)."""
        runner = self.environment.runner
        if self.is_master and runner.clients:
            runner.send_message(
                PHASE_MESSAGE, {"stage": self.stage, "kind": self.kind, "seq": self.phase_seq}
            )

    def end_window(self, stage: int) -> None:
        """The window of ``stage`` just closed: stop counting toward it here and on every worker,
        before anything slow (a /metrics read) happens."""
        self.set_phase(stage, "closing")
        self.broadcast_phase()

    def on_tokens(self, n: int) -> None:
        """Live token arrival: counts toward the window of the stage being measured."""
        self.collector.add_window_tokens(self.measuring, n)

    def finished(self, stage: int) -> int:
        """Measured requests of ``stage`` that have finished (ok or failed), as merged so far."""
        stats = self.collector.stages.get(stage)
        return 0 if stats is None else stats.requests_ok + stats.error_count

    def finished_total(self) -> int:
        """Every request finished so far in the run (ok or failed, measured or not)."""
        t = self.collector.totals
        return t.requests_ok + t.error_count

    def stage_done(self, stage: int) -> bool:
        """No request of ``stage`` is still running anywhere.

        On the master this needs, from every live worker, a report sent after the worker learned
        that the stage's window closed (its phase seq), so a stale report cannot finalize early.
        """
        if not self.is_master:
            return self.collector.inflight.get(stage, 0) == 0
        needed = self.session.close_seq.get(stage, 0)
        for client_id in self.live_workers():
            if self.worker_phase_seq.get(client_id, 0) < needed:
                return False
        return self.inflight(stage) == 0

    def all_idle(self) -> bool:
        """No request of any stage (measured or not) is running anywhere: the drain may end.

        On the master this needs, from every live worker, a report sent after the worker adopted
        the current phase (the drain: it sends nothing new), like ``stage_done``.
        """
        if not self.is_master:
            return not any(self.collector.inflight.values())
        for client_id in self.live_workers():
            if self.worker_phase_seq.get(client_id, 0) < self.phase_seq:
                return False
        return not any(int(n) for d in self.worker_inflight.values() for n in d.values())

    def live_workers(self) -> list[str]:
        """Master: ids of workers that are connected (not missing)."""
        from locust.runners import STATE_MISSING

        return [c.id for c in self.environment.runner.clients.values() if c.state != STATE_MISSING]

    def fatal(self, exc: Exception) -> None:
        """The target cannot be load-tested: stop the run with a clear message (exit code 4).

        Once per process: every user meets the same problem, one line says it.
        """
        from loadgen.errors import EXIT_SERVER_UNUSABLE

        if self.fatal_sent:
            return
        self.fatal_sent = True
        session = getattr(self, "session", None)
        if session is not None:
            session.fatal(EXIT_SERVER_UNUSABLE, str(exc))
        else:
            log.error("llm-loadgen: %s", self.redact(str(exc)))
            if self.is_worker:  # the master owns the run: it stops it and sets the exit code
                self.environment.runner.send_message(FATAL_MESSAGE, self.redact(str(exc)))

    def redact(self, text: str) -> str:
        """``text`` without the API key (a server may echo it back in an error message)."""
        return text.replace(self.api_key, "<API key>") if self.api_key else text

    # -- model discovery (each process, once) ------------------------------------------------------
    def model(self, client) -> str:
        if self._model is None:
            with self._model_lock:
                if self._model is None:
                    self._model = discover_model(client)
        return self._model

    # -- exporter -----------------------------------------------------------------------------------
    def exporter_snapshot(self):
        """What the Prometheus exporter shows now (only on the process that owns the run)."""
        from loadgen.exporter import ExporterSnapshot

        session, sc = self.session, self.scenario
        if self.is_master:
            inflight = sum(sum(d.values()) for d in self.worker_inflight.values())
            now = list(self.worker_health_now.values())
            cpu = max((h[0] for h in now), default=None)
            lag = max((h[1] for h in now), default=None)
        else:
            inflight = sum(self.collector.inflight.values())
            cpu, lag = self.health.cpu_percent_now, self.health.loop_lag_now_s
        decision = session.last_decision if session else None
        capacity = session.capacity if session else None
        info = session.stage_info.get(self.stage, {}) if session and self.stage is not None else {}
        return ExporterSnapshot(
            totals=self.collector.totals,
            inflight=inflight,
            users=self.environment.runner.user_count if self.environment.runner else 0,
            stage_index=self.stage,
            target_concurrency=info.get("concurrency"),
            phase=self.kind,
            kv_projected_tokens=decision.projected_tokens if decision else None,
            kv_capacity_tokens=capacity.tokens if capacity else None,
            guard_breaches=session.guard_state["breaches"] if session else 0,
            client_cpu_percent=cpu,
            client_loop_lag_s=lag,
            model=self._model or "",
            endpoint=sc.endpoint,
            scenario=sc.name,
        )

    # -- distributed plumbing ----------------------------------------------------------------------
    def report(self) -> dict:
        """Worker: everything since the last report, plus absolute in-flight counts.

        The worker also keeps its own ledger of every total it shipped, written at quit to
        ``<results-dir>/workers/<client id>.json`` so a run can be audited: the master's totals
        equal the sum of the ledgers.
        """
        delta = self.collector.take_delta()
        self.ledger.merge(StageStats.from_wire(delta["totals"]))
        return {
            "delta": delta,
            "health": self.health.take_delta(),
            "inflight": dict(self.collector.inflight),
            "phase_seq": self.phase_seq,
            "health_now": [self.health.cpu_percent_now, self.health.loop_lag_now_s],
        }

    def merge_report(self, client_id: str, data: dict) -> None:
        """Master: merge one worker report."""
        self.workers_seen.add(client_id)
        self.collector.merge_delta(data["delta"])
        self.merge_health(client_id, data["health"])
        self.worker_inflight[client_id] = data["inflight"]
        self.worker_phase_seq[client_id] = data["phase_seq"]
        self.worker_health_now[client_id] = data["health_now"]

    def merge_health(self, client_id: str, health: dict) -> None:
        """Fold one process's health delta into the per-stage, per-process table."""
        for key, wire in health.items():
            per_worker = self.health_by_stage.setdefault(key, {})
            h = StageHealth.from_wire(wire)
            if client_id in per_worker:
                per_worker[client_id].merge(h)
            else:
                per_worker[client_id] = h

    def inflight(self, stage: int) -> int:
        """Requests of ``stage`` still running, over every load-generating process."""
        if self.is_master:
            return sum(int(d.get(stage, 0)) for d in self.worker_inflight.values())
        return int(self.collector.inflight.get(stage, 0))

    def stage_health(self, stage: int) -> dict:
        """The worst load-generating process's health summary during ``stage``."""
        if not self.is_master:  # a local run generates load in this very process
            self.merge_health("local", self.health.take_delta())
        per_worker = self.health_by_stage.get(stage, {})
        return worst_of([h.summary() for h in per_worker.values()])


def api_key(scenario) -> str | None:
    """The key from the environment variable the scenario names (``api_key_env``; null: no key)."""
    return (os.environ.get(scenario.api_key_env) or None) if scenario.api_key_env else None


def discover_model(client) -> str:
    """The first model id from GET /v1/models; ServerUnusableError (with ``kind``) if none."""
    from loadgen.errors import NOT_OPENAI, RequestError, ServerUnusableError

    try:
        data = client.get_json("/v1/models")
        return data["data"][0]["id"]
    except RequestError as exc:
        raise ServerUnusableError(
            f"GET /v1/models failed ({exc}); set the model with --model or `model:` in the scenario",
            kind=exc.kind, detail=exc.message,
        ) from None
    except (KeyError, IndexError, TypeError):
        raise ServerUnusableError(
            "GET /v1/models did not list a model; is this an OpenAI-compatible server? "
            "Set --model to skip discovery", kind=NOT_OPENAI, detail="GET /v1/models did not list a model",
        ) from None


def not_openai_message(host: str, what: str) -> str:
    """The one line that says the target does not speak the OpenAI API (``what``: the evidence)."""
    return (f"{host} is not an OpenAI-compatible server: {what}; check --host (the server's base URL, "
            "e.g. http://127.0.0.1:8000) and --endpoint")


def write_ledger(rt: Runtime) -> None:
    """Worker: what this worker recorded and shipped (after its final report)."""
    import json
    from pathlib import Path

    client_id = rt.environment.runner.client_id
    path = Path(rt.scenario.results_dir) / "workers" / f"{client_id}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"client_id": client_id, "totals": rt.ledger.to_wire()}))
    except OSError as exc:
        log.warning("could not write the worker ledger %s: %s", path, exc)


def install(environment) -> Runtime:
    """Create this process's Runtime from the parsed options and hook it into Locust's events."""
    scenario = scenario_from_options(environment.parsed_options)
    rt = Runtime(environment, scenario)
    environment.llm = rt
    events = environment.events

    @events.test_start.add_listener
    def _on_test_start(environment, **_):
        # A separately started worker saw default options at init; the master's arrive now.
        if rt.is_worker:
            rt.scenario = scenario_from_options(environment.parsed_options)
            rt._model = rt.scenario.model
            rt.api_key = api_key(rt.scenario)
        if not rt.is_master:
            rt.health.start()

    @events.test_stop.add_listener
    def _on_test_stop(environment, **_):
        rt.health.stop()

    @events.quit.add_listener
    def _on_quit(**_):
        if rt.is_worker:
            write_ledger(rt)

    @events.report_to_master.add_listener
    def _on_report_to_master(client_id, data, **_):
        data["llm"] = rt.report()

    @events.worker_report.add_listener
    def _on_worker_report(client_id, data, **_):
        if "llm" in data:
            rt.merge_report(client_id, data["llm"])

    def _on_phase(environment, msg, **_):
        d = msg.data
        rt.set_phase(d["stage"], d["kind"], seq=d["seq"])

    def _on_fatal(environment, msg, **_):
        from loadgen.errors import EXIT_SERVER_UNUSABLE

        if rt.session is not None and not rt.fatal_sent:
            rt.fatal_sent = True
            rt.session.fatal(EXIT_SERVER_UNUSABLE, f"worker {msg.node_id}: {msg.data}")

    if environment.runner is not None and rt.is_worker:
        environment.runner.register_message(PHASE_MESSAGE, _on_phase)
    elif environment.runner is not None and rt.is_master:
        environment.runner.register_message(FATAL_MESSAGE, _on_fatal)
    return rt

