"""What the master books when a worker is lost: which requests, which stages, and how it knows. Pure.

The master hears from a worker two ways (times on the master's clock, seconds):

- its report (``WORKER_REPORT_INTERVAL`` = 3 s): every sample since the one before, and the
  absolute in-flight count per stage ``R`` -- exact at the report's arrival ``report_t``;
- its heartbeat (1 s; Locust's ``heartbeat_sent`` event fires on the master as one arrives), with
  the user count ``U`` the master knows for it then (Locust's ``spawning_complete`` and reports).

A worker that stops sending both is lost (Locust marks it missing 3-4 s later). It was alive when
last heard, ``heard_t``, and dead before its next heartbeat was due, ``heard_t + heartbeat_s``:
that is the *death span*. Everything it did after its last report is missing from the master's
totals: the samples it finished since (how many is unknown; the ledger it would have written dies
with it) and the requests it had in flight when it died. ``book_loss`` books:

- ``stage``/``phase``: the master's phase when it last heard the worker (the worker learned each
  phase the broadcast delay later);
- ``inflight_lost``, the requests in flight at its death:
  closed loop, ``U`` -- an upper bound (``inflight_lost_is = "at_most"``): a closed-loop user has
  at most one request in flight, and the worker died with at most the users it had when last heard
  (``inflight_lost_from = "users"``; a worker dying in the middle of a spawn may have had the
  spawn's users, more than ``U``); when no phase from ``report_t`` to the end of the death span
  sent requests (the drain), ``sum(R)`` is the bound (``"last_report"``): those could only finish;
  open loop (one dispatcher user keeps many requests in flight), or with ``U`` unknown, ``sum(R)``
  as of the last report (``inflight_lost_is = "as_of_last_report"``), as old as that report;
- ``running``, those requests by stage: a stage whose window was not open from ``report_t`` to the
  end of the death span sent none of them after the report, so it is booked at most ``R[k]``; the
  rest of the bound goes to the last stage whose window was open in that span (``None`` when none
  was: warmup requests, no stage's). Every stage whose window was open in that span is booked, with
  0 when no request is: it lost the worker's unreported samples (the ``worker_lost`` flag);
- a worker that never reported is treated as having reported nothing when first heard.

A worker alive at the stop whose final report did not arrive in time is booked the same way at the
stop (``reason = "no_final_report"``); its requests were cut by its stop (``cancelled_requests``
on its side) and counted nowhere on the master's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loadgen.phases import Phase

STOPPED_REPORTING = "stopped_reporting"  # heartbeats and reports stopped: Locust marked it missing
NO_FINAL_REPORT = "no_final_report"  # alive at the stop, its final report never came


@dataclass
class WorkerEvidence:
    """What the master last heard from one worker (its clock, s)."""

    first_t: float
    heard_t: float
    report_t: float | None = None
    inflight: dict = field(default_factory=dict)  # {stage or None: requests} at report_t
    users: int | None = None  # the worker's users as the master knew them at heard_t

    def heard(self, t: float, users: int | None) -> None:
        """A heartbeat (or report) arrived at ``t``; ``users``: the master's count for it then."""
        self.heard_t = max(self.heard_t, t)
        if users is not None:
            self.users = users

    def reported(self, t: float, inflight: dict, users: int | None) -> None:
        self.report_t = t
        self.inflight = {k: int(n) for k, n in inflight.items() if n}
        self.heard(t, users)


class PhaseTimeline:
    """The master's phases as they began: ``note(t, seq, stage, kind)`` once per phase seq."""

    def __init__(self):
        self.marks: list[tuple[float, int, int | None, Phase]] = []

    def note(self, t: float, seq: int, stage: int | None, kind: str) -> None:
        if not self.marks or seq > self.marks[-1][1]:
            self.marks.append((t, seq, stage, Phase(kind)))

    def at(self, t: float) -> tuple[int | None, Phase]:
        """(stage, phase) at ``t`` (IDLE before the first)."""
        now = (None, Phase.IDLE)
        for mt, _, stage, kind in self.marks:
            if mt > t:
                break
            now = (stage, kind)
        return now

    def _during(self, t0: float, t1: float) -> list[tuple[int | None, Phase]]:
        """(stage, phase) of every phase current at some time in [t0, t1], in order."""
        out = [] if self.marks and self.marks[0][0] <= t0 else [(None, Phase.IDLE)]
        for i, (start, _, stage, kind) in enumerate(self.marks):
            end = self.marks[i + 1][0] if i + 1 < len(self.marks) else float("inf")
            if start <= t1 and end >= t0:
                out.append((stage, kind))
        return out

    def measured(self, t0: float, t1: float) -> list[int]:
        """Stages whose window (a MEASURE phase) was open at some time in [t0, t1], in order."""
        out: list[int] = []
        for stage, kind in self._during(t0, t1):
            if kind is Phase.MEASURE and stage not in out:
                out.append(stage)
        return out

    def sent(self, t0: float, t1: float) -> bool:
        """Some phase in [t0, t1] let users send new requests (not only the drain or done)."""
        return any(kind.sends_requests for _, kind in self._during(t0, t1))


@dataclass(frozen=True)
class LostWorker:
    """A lost worker and what is booked against it (module docstring)."""

    client_id: str
    running: dict  # {stage or None: requests in flight booked lost}; 0: the stage lost samples only
    stage: int | None = None  # the master's stage and phase when it last heard the worker
    phase: str = str(Phase.IDLE)
    inflight_lost_is: str = "as_of_last_report"  # or "at_most": an upper bound
    inflight_lost_from: str = "last_report"  # or "users": the users it had when last heard
    users: int | None = None
    heard_t: float | None = None
    report_t: float | None = None
    reason: str = STOPPED_REPORTING

    @property
    def requests(self) -> int:
        """``inflight_lost``: requests in flight at its death, booked lost."""
        return sum(self.running.values())

    def record(self, wall) -> dict:
        """summary.json fields (``run.worker_losses``); ``wall(t)`` -> ISO time of a clock time."""
        return {"phase": self.phase, "reason": self.reason, "inflight_lost": self.requests,
                "inflight_lost_is": self.inflight_lost_is, "inflight_lost_from": self.inflight_lost_from,
                "users": self.users,
                "last_heard_at": wall(self.heard_t), "last_report_at": wall(self.report_t)}

    def describe(self) -> str:
        """The console line (without the ``llm-loadgen: `` prefix)."""
        if self.inflight_lost_from == "users":
            how = f"at most {self.requests} requests in flight ({self.users} users when last heard)"
        else:
            bound = "at most " if self.inflight_lost_is == "at_most" else ""
            how = f"{bound}{self.requests} requests in flight (its last report's count)"
        stages = sorted(k for k in self.running if k is not None)
        lost = f"{how} and its samples since its last report are lost (stages {stages or 'none'})"
        if self.reason == NO_FINAL_REPORT:
            return (f"warning: worker {self.client_id}: no final report at the stop (last heard in stage "
                    f"{self.stage}, {self.phase}); {lost}")
        return f"worker {self.client_id} lost during stage {self.stage} ({self.phase}); {lost}; carrying on"


def book_loss(client_id: str, ev: WorkerEvidence, timeline: PhaseTimeline, closed_loop: bool,
              heartbeat_s: float, reason: str = STOPPED_REPORTING) -> LostWorker:
    """The booking of the module docstring."""
    since = ev.report_t if ev.report_t is not None else ev.first_t
    until = ev.heard_t + heartbeat_s  # the end of the death span
    open_stages = timeline.measured(since, until)
    reported = dict(ev.inflight) if ev.report_t is not None else {}
    running: dict = {k: 0 for k in open_stages}
    if closed_loop and ev.users is not None and timeline.sent(since, until):
        kept = {k: n for k, n in reported.items() if k not in open_stages}  # they could only finish
        running.update(kept)
        last = open_stages[-1] if open_stages else None
        running[last] = running.get(last, 0) + max(ev.users - sum(kept.values()), 0)
        how = ("at_most", "users")
    else:
        for k, n in reported.items():
            running[k] = running.get(k, 0) + n
        sent = timeline.sent(since, until)
        how = ("as_of_last_report" if sent else "at_most", "last_report")
    running = {k: n for k, n in running.items() if n or k is not None}
    stage, phase = timeline.at(ev.heard_t)
    return LostWorker(client_id, running, stage, str(phase), *how, ev.users, ev.heard_t, ev.report_t, reason)
