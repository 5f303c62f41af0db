"""The load-generating processes as the process that owns the run sees them, and their messages.

A local run generates load in the owning process itself; a distributed run in its workers. Either
way the owner asks the same questions of one ``Fleet``: is stage k done, is everything idle, how
many requests are in flight, how healthy was the worst client during a stage, which workers were
lost. On a worker, the ``Fleet`` instead ships reports and writes the worker's ledger.

Wire (Locust custom messages and report hooks; msgpack-safe dicts):
- master -> workers ``llm_phase`` ``{"stage", "kind", "seq", "rate", "parts", "sent_t"}``, sent at
  once when the phase changes and re-sent every ``PHASE_RESEND_S`` so late joiners catch up; a worker drops a seq it already passed. ``sent_t`` is the
  master's clock at sending, echoed back in reports to measure the round trip. Open loop: ``rate`` is the
  stage's offered requests/s and ``parts`` the client ids sharing it (fixed at the stage's ramp); a
  worker sends part ``parts.index(its id)`` of ``len(parts)``, one not listed sends nothing. Closed
  loop: ``rate`` None, ``parts`` [].
- worker -> master report (``report_to_master`` every 3 s and once at quit) under ``data["llm"]``:
  ``{"delta": Collector.take_delta(), "health": HealthMonitor.take_delta(), "inflight": {stage: n}
  (absolute), "phase_seq": int, "health_now": [cpu %, loop lag s], "echo": [sent_t, held_s] or
  None, "requests": [the per-request export's fields since the last report]}``; ``echo``: the newest ``llm_phase``'s ``sent_t`` and how long the worker held it, so
  the master's round trip = its clock now - sent_t - held_s (no clocks compared across hosts).
  Deltas are additive and never resent, so master totals are exactly the sum of every worker's
  samples (= the sum of the ledgers in ``<results-dir>/workers/<client id>.json``).
- worker -> master ``llm_fatal`` (text): the worker found the target unusable; the owner stops.
- at a stop, master -> workers ``llm_final`` (no data), worker -> master ``llm_final_report``
  (Locust's whole report payload, the ``llm`` report above included): ``loadgen.fleet.final_reports``.

A worker that stops reporting is *lost*: its samples so far stay counted, its in-flight requests
are lost and no longer hold back the stages they belong to; what is booked, and how it is known,
is ``loadgen.fleet.worker_loss`` (heartbeats, the last report, the master's phase timeline). So is a
worker alive at the stop whose final report never came.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from loadgen.fleet.final_reports import FinalReports
from loadgen.fleet.worker_loss import (
    NO_FINAL_REPORT,
    STOPPED_REPORTING,
    LostWorker,
    PhaseTimeline,
    WorkerEvidence,
    book_loss,
)
from loadgen.run.health import StageHealth, worst_of
from loadgen.run.results import iso
from loadgen.stats.stage_stats import PART_TABLES, StageStats
from loadgen.wire.compat import Compat

log = logging.getLogger("llm_loadgen")

PHASE_MESSAGE = "llm_phase"
FATAL_MESSAGE = "llm_fatal"  # worker -> master: this target cannot be load-tested
HEARTBEAT_S = 1.0  # Locust's HEARTBEAT_INTERVAL: a live worker is heard at least this often
LOCAL = "local"  # the health table's key for a local run's own process

__all__ = ["Fleet", "LostWorker"]

PHASE_RESEND_S = 1.0  # the master re-sends an unchanged phase this often (a worker that joined late)


class Fleet:
    """Per-worker tables (master), or this process's own figures (local runner); see the module
    docstring. ``rt`` is this process's ``Runtime`` (collector, phase, health monitor)."""

    def __init__(self, rt, clock=time.monotonic):
        self.rt, self.clock = rt, clock
        self.inflight_by_worker: dict[str, dict] = {}  # absolute, from each worker's latest report
        self.phase_seq_by_worker: dict[str, int] = {}
        self.health_now_by_worker: dict[str, list] = {}  # [cpu %, loop lag s] from the latest report
        self.health_by_stage: dict[int | None, dict[str, StageHealth]] = {}
        self.workers_seen: set[str] = set()
        self.ledger = StageStats()  # worker: every total shipped to the master
        # worker, a mix of models or several replicas: per table (PART_TABLES), stage and name
        self.part_ledgers: dict[str, dict[int, dict[str, StageStats]]] = {key: {} for key in PART_TABLES}
        self.parts: list[str] = []  # master, open loop: the client ids sharing this stage's rate
        # master: what it last heard from each worker and its own phases, to book a loss
        self.evidence: dict[str, WorkerEvidence] = {}
        self.timeline = PhaseTimeline()
        self._sent_seq, self._sent_t = -1, 0.0  # master: the phase seq last broadcast, and when
        self.finals = FinalReports(rt.environment.runner, self.live_workers, clock) if self.master else None
        self.echo: tuple[float, float] | None = None  # worker: (sent_t, our clock on arrival)

    @property
    def master(self) -> bool:
        return self.rt.is_master

    # -- worker side -------------------------------------------------------------------------------
    def report(self) -> dict:
        """Worker: everything since the last report, plus absolute in-flight counts (module doc)."""
        rt = self.rt
        delta = rt.collector.take_delta()
        self.ledger.merge(StageStats.from_message(delta["totals"]))
        for key, ledger in self.part_ledgers.items():
            for k, by_name in delta.get(key, ()):
                for name, wire in by_name.items():
                    ledger.setdefault(k, {}).setdefault(name, StageStats()).merge(StageStats.from_message(wire))
        return {
            "delta": delta,
            "health": rt.health.take_delta(),
            "inflight": dict(rt.collector.inflight),
            "phase_seq": rt.phase_seq,
            "health_now": [rt.health.cpu_percent_now, rt.health.loop_lag_now_s],
            "echo": None if self.echo is None else [self.echo[0], self.clock() - self.echo[1]],
            "requests": rt.request_sink.take() if rt.request_sink is not None else [],
        }

    def write_ledger(self) -> None:
        """Worker: what this worker recorded and shipped (after its final report); with a mix of
        models also ``models``: [[stage, {model: wire}]], as ``Collector.take_delta`` ships them,
        and with several replicas ``replicas`` likewise."""
        client_id = self.rt.environment.runner.client_id
        path = Path(self.rt.scenario.results_dir) / "workers" / f"{client_id}.json"
        ledger = {"client_id": client_id, "totals": self.ledger.to_message()}
        for key, parts in self.part_ledgers.items():
            if parts:
                ledger[key] = [[k, {name: s.to_message() for name, s in by_name.items()}]
                               for k, by_name in sorted(parts.items())]
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(ledger))
        except OSError as exc:
            log.warning("could not write the worker ledger %s: %s", path, exc)

    # -- master side -------------------------------------------------------------------------------
    def merge_report(self, client_id: str, data: dict, users: int | None = None) -> None:
        """Master: merge one worker report (``users``: the user count Locust's report carries)."""
        now = self.clock()
        self.workers_seen.add(client_id)
        self.rt.collector.merge_delta(data["delta"])
        if data.get("requests") and self.rt.request_sink is not None:
            self.rt.request_sink.add_many(data["requests"])
        self.merge_health(client_id, data["health"])
        self.inflight_by_worker[client_id] = data["inflight"]
        self.phase_seq_by_worker[client_id] = data["phase_seq"]
        self.health_now_by_worker[client_id] = data["health_now"]
        self._evidence(client_id, now).reported(now, data["inflight"], users)
        if data.get("echo"):
            self.finals.round_trip(client_id, now, *data["echo"])

    def heard(self, client_id: str, users: int | None) -> None:
        """Master: a heartbeat of ``client_id`` arrived; ``users``: its user count known now."""
        now = self.clock()
        self._evidence(client_id, now).heard(now, users)

    def _evidence(self, client_id: str, now: float) -> WorkerEvidence:
        if client_id not in self.evidence:
            self.evidence[client_id] = WorkerEvidence(first_t=now, heard_t=now)
        return self.evidence[client_id]

    def wall_iso(self, t: float | None) -> str | None:
        """A time of ``clock`` as ISO wall-clock time (None stays None)."""
        return None if t is None else iso(time.time() - (self.clock() - t))

    def merge_health(self, client_id: str, health: dict) -> None:
        """Fold one process's health delta into the per-stage, per-process table."""
        for key, wire in health.items():
            per_worker = self.health_by_stage.setdefault(key, {})
            h = StageHealth.from_message(wire)
            if client_id in per_worker:
                per_worker[client_id].merge(h)
            else:
                per_worker[client_id] = h

    def broadcast_phase(self) -> None:
        """Master, every shape tick: send the current phase to every worker at once when it is new,
        else again once ``PHASE_RESEND_S`` passed since the last send (idempotent; workers drop old
        seqs)."""
        rt, runner = self.rt, self.rt.environment.runner
        if not self.master:
            return
        now = self.clock()
        self.timeline.note(now, rt.phase_seq, rt.stage, rt.kind)
        if rt.phase_seq == self._sent_seq and now - self._sent_t < PHASE_RESEND_S:
            return
        self._sent_seq, self._sent_t = rt.phase_seq, now
        if runner.clients:
            runner.send_message(PHASE_MESSAGE, {"stage": rt.stage, "kind": str(rt.kind), "seq": rt.phase_seq,
                                                 "compat": rt.compat.to_dict() if rt.compat else None,
                                                 "rate": rt.rate_per_s, "parts": self.parts, "sent_t": now})

    def assign_parts(self) -> int:
        """Open loop, at a stage's ramp: the processes that share its rate (master: the live
        workers, in a fixed order; local: this process). Returns how many."""
        if not self.master:
            return 1
        self.parts = sorted(self.live_workers())
        return max(len(self.parts), 1)

    def live_workers(self) -> list[str]:
        """Master: ids of workers that are connected (not missing)."""
        from locust.runners import STATE_MISSING

        return [c.id for c in self.rt.environment.runner.clients.values() if c.state != STATE_MISSING]

    def drop_lost(self) -> list[LostWorker]:
        """Master: forget the workers that are lost -- no longer connected, or alive at the stop
        without their final report -- and book each (``loadgen.fleet.worker_loss.book_loss``). A worker
        whose final report arrived is done, not lost."""
        if not self.master:
            return []
        live = set(self.live_workers())
        closed_loop = not self.rt.scenario.open_loop
        lost = []
        done, missing = self.finals.received, self.finals.missing
        for cid in [c for c in self.evidence if (c not in live or c in missing) and c not in done]:
            ev = self.evidence.pop(cid)
            reason = NO_FINAL_REPORT if cid in missing else STOPPED_REPORTING
            lost.append(book_loss(cid, ev, self.timeline, closed_loop, HEARTBEAT_S, reason))
            self.inflight_by_worker.pop(cid, None)
            self.phase_seq_by_worker.pop(cid, None)
            self.health_now_by_worker.pop(cid, None)
        return lost

    # -- the owner's questions -------------------------------------------------------------------------
    def _reported_since(self, seq: int) -> bool:
        """Every live worker sent a report after adopting phase ``seq``."""
        return all(self.phase_seq_by_worker.get(cid, 0) >= seq for cid in self.live_workers())

    def stage_done(self, stage: int, close_seq: int) -> bool:
        """No request of ``stage`` is still running anywhere.

        On the master this needs, from every live worker, a report sent after the worker learned
        that the stage's window closed (phase seq ``close_seq``), so a stale report cannot
        finalize early.
        """
        if self.master and not self._reported_since(close_seq):
            return False
        return self.inflight(stage) == 0

    def all_idle(self) -> bool:
        """No request of any stage (measured or not) is running anywhere: the drain may end.

        On the master this needs, from every live worker, a report sent after the worker adopted
        the current phase (the drain: it sends nothing new), like ``stage_done``.
        """
        if not self.master:
            return not any(self.rt.collector.inflight.values())
        if not self._reported_since(self.rt.phase_seq):
            return False
        return not any(int(n) for d in self.inflight_by_worker.values() for n in d.values())

    def inflight(self, stage: int) -> int:
        """Requests of ``stage`` still running, over every load-generating process."""
        if self.master:
            return sum(int(d.get(stage, 0)) for d in self.inflight_by_worker.values())
        return int(self.rt.collector.inflight.get(stage, 0))

    def inflight_total(self) -> int:
        if self.master:
            return sum(sum(d.values()) for d in self.inflight_by_worker.values())
        return sum(self.rt.collector.inflight.values())

    def health_now(self) -> tuple[float | None, float | None]:
        """(CPU %, event-loop lag s) now: the worst worker's, or this process's."""
        if not self.master:
            return self.rt.health.cpu_percent_now, self.rt.health.loop_lag_now_s
        now = list(self.health_now_by_worker.values())
        return max((h[0] for h in now), default=None), max((h[1] for h in now), default=None)

    def stage_health(self, stage: int) -> dict:
        """The worst load-generating process's health summary during ``stage``."""
        if not self.master:  # a local run generates load in this very process
            self.merge_health(LOCAL, self.rt.health.take_delta())
        per_worker = self.health_by_stage.get(stage, {})
        return worst_of([h.summary() for h in per_worker.values()])

    # -- Locust's hooks and messages (registered by loadgen.locust_face.plugin) --------------------
    def on_report_to_master(self, client_id, data, **_) -> None:
        data["llm"] = self.report()

    def on_worker_report(self, client_id, data, **_) -> None:
        if "llm" in data:
            self.merge_report(client_id, data["llm"], data.get("user_count"))

    def on_heartbeat(self, client_id, **_) -> None:
        """Master: a worker's heartbeat arrived (Locust 2.47's ``heartbeat_sent`` event)."""
        if self.rt.is_master:
            node = self.rt.environment.runner.clients.get(client_id)
            self.heard(client_id, node.user_count if node is not None else None)

    def on_quit(self, **_) -> None:
        if self.rt.is_worker:
            self.write_ledger()

    def on_phase_message(self, environment, msg, **_) -> None:
        """Worker: the master's ``llm_phase``: the phase, this process's share of a rate, and what
        the server accepts."""
        rt, d = self.rt, msg.data
        if d.get("sent_t") is not None:
            self.echo = (d["sent_t"], self.clock())
        if d.get("compat") and rt.compat is None:  # what the master's start check found the server accepts
            rt.compat = Compat.from_dict(d["compat"])
        if d["seq"] > rt.phase_seq:
            parts = list(d.get("parts") or [])
            me = rt.environment.runner.client_id
            rt.set_arrivals(d.get("rate"), parts.index(me) if me in parts else None, len(parts))
        rt.set_phase(d["stage"], d["kind"], seq=d["seq"])

    def on_fatal_message(self, environment, msg, **_) -> None:
        """Master: a worker's ``llm_fatal``: the target is unusable; the run stops."""
        self.rt.fatal(f"worker {msg.node_id}: {msg.data}")

    def tell_master(self, message: str) -> None:
        """Worker: ``rt.fatal``'s route: one line here, and the master stops the run."""
        log.error("llm-loadgen: %s", self.rt.redact(message))
        self.rt.environment.runner.send_message(FATAL_MESSAGE, self.rt.redact(message))

    @property
    def workers(self) -> int:
        """Load-generating processes that took part (1 for a local run)."""
        return len(self.workers_seen) if self.master else 1
