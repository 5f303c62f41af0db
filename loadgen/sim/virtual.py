"""The engine on a simulated clock: a whole sweep in CPU seconds, no sockets, no sleeping.

``VirtualServer`` drives the same ``Engine.step()`` the HTTP simulator's ``EngineRunner`` drives,
and admits requests by the same rule, so for the same arrivals both produce the same schedule:

- the runner computes step n+1 right after it delivered step n's chunks (at step n's end), then
  sleeps through it; a request that arrives while it sleeps joins step n+2. Here: a request that
  arrives at ``t`` is submitted before the first step that *starts* strictly after ``t``
  (``t < start``), or, when the engine is idle, it starts a step at ``t`` itself (the runner's
  wake-up), together with every request arriving at that same instant;
- step k lasts the engine's ``duration_s`` and its chunks reach their clients at its end.

So a closed-loop user whose request finishes at the end of step n sends its next one at that
instant and it joins step n+2, as over HTTP (where the client needs a few microseconds more).

Clients are callbacks: ``on_chunk(req, n, done, t)`` is called for every chunk at the step's end
and may ``submit`` new requests (``loadgen.predict`` builds closed-loop users and open-loop arrivals
on it). Times are the engine's simulated seconds.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from loadgen.sim.engine import Engine, EngineParams, QueueFull, SimRequest

OnChunk = Callable[[SimRequest, int, bool, float], None]


@dataclass
class StepRecord:
    """One step of the schedule: when it started, how long, and what it emitted (request ids)."""

    start_s: float
    duration_s: float
    emitted: tuple[tuple[int, int, bool], ...]  # (request id, tokens, finished)


@dataclass
class VirtualServer:
    params: EngineParams
    on_chunk: OnChunk
    record: bool = False  # keep every StepRecord in ``schedule`` (tests; memory grows with steps)
    now_s: float = 0.0
    schedule: list[StepRecord] = field(default_factory=list)
    rejected: int = 0  # QueueFull: max_queued requests already waited (a 503 over HTTP)

    def __post_init__(self) -> None:
        self.engine = Engine(self.params)
        self._arrivals: list[tuple[float, int, SimRequest]] = []  # heap of (t, order, request)
        self._order = itertools.count()
        self.steps_total = 0

    def submit(self, req: SimRequest, t: float) -> None:
        """``req`` arrives at simulated time ``t`` (not before now)."""
        heapq.heappush(self._arrivals, (max(t, self.now_s), next(self._order), req))

    def run_until(self, end_s: float) -> None:
        """Run steps until the clock passes ``end_s`` or nothing is left to do."""
        while self.now_s < end_s and self.advance(end_s):
            pass

    def advance(self, horizon_s: float = float("inf")) -> bool:
        """Run one step (an idle engine first waits for the next arrival, as the runner does);
        False when nothing is left to do, or the next arrival comes after ``horizon_s``."""
        engine, arrivals = self.engine, self._arrivals
        if engine.idle:
            if not arrivals or arrivals[0][0] > horizon_s:
                return False
            self.now_s = max(self.now_s, arrivals[0][0])  # the runner wakes at the arrival
            self._admit(inclusive=True)
        else:
            self._admit(inclusive=False)
        self._step()
        return True

    def _admit(self, inclusive: bool) -> None:
        arrivals, now = self._arrivals, self.now_s
        while arrivals and (arrivals[0][0] <= now if inclusive else arrivals[0][0] < now):
            _, _, req = heapq.heappop(arrivals)
            try:
                self.engine.submit(req)
            except QueueFull:
                self.rejected += 1
                self.on_chunk(req, 0, True, now)

    def _step(self) -> None:
        start = self.now_s
        duration, events = self.engine.step()
        self.now_s = end = start + duration
        self.steps_total += 1
        if self.record:
            self.schedule.append(StepRecord(start, duration, tuple((id(r), n, d) for r, n, d in events)))
        for req, n, done in events:
            self.on_chunk(req, n, done, end)
