"""The engine on a simulated clock: a whole sweep in CPU seconds, no sockets, no sleeping.

``VirtualServer`` is the simulated-time ``Clock`` of ``loadgen.engine_model.steploop.StepLoop``, the loop
the HTTP simulator's ``EngineRunner`` runs in wall time, so for the same arrivals both produce the
same schedule (the loop's rules: a request that arrives while step n+1 runs joins step n+2; an idle
engine starts a step at the arrival). What differs is how time passes and how arrivals come in:

- time: ``sleep_until`` sets the clock to the step's end (it is never late);
- arrivals: ``submit(req, t)`` puts a request in a heap by its arrival time; those due strictly
  before a step starts are queued in the engine just before it is computed, and an idle engine
  jumps to the next arrival and queues every request arriving at that same instant.

Clients are callbacks: ``on_chunk(req, n, done, t)`` is called for every chunk at the step's end
and may ``submit`` new requests (``loadgen.whatif`` builds closed-loop users and open-loop arrivals
on it). A request the engine refuses (``max_queued``) gets ``on_chunk(req, 0, True, t)`` at the
start of the step it would have joined. Times are the engine's simulated seconds.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from loadgen.engine_model.engine import Engine, EngineParams, QueueFull, SimRequest
from loadgen.engine_model.steploop import StepLoop

OnChunk = Callable[[SimRequest, int, bool, float], None]


@dataclass
class StepTrace:
    """One step of the schedule: when it started, how long, and what it emitted (request ids)."""

    start_s: float
    duration_s: float
    emitted: tuple[tuple[int, int, bool], ...]  # (request id, tokens, finished)


@dataclass
class VirtualServer:
    params: EngineParams
    on_chunk: OnChunk
    record: bool = False  # keep every StepTrace in ``schedule`` (tests; memory grows with steps)
    now_s: float = 0.0
    schedule: list[StepTrace] = field(default_factory=list)
    rejected: int = 0  # QueueFull: max_queued requests already waited (a 503 over HTTP)

    def __post_init__(self) -> None:
        self.engine = Engine(self.params)
        self.loop = StepLoop(self.engine, self._deliver)
        self._arrivals: list[tuple[float, int, SimRequest]] = []  # heap of (t, order, request)
        self._order = itertools.count()
        self._horizon_s = float("inf")
        self._step_start_s = 0.0

    @property
    def steps_total(self) -> int:
        return self.loop.steps_total

    def submit(self, req: SimRequest, t: float) -> None:
        """``req`` arrives at simulated time ``t``. A ``t`` before now (a client that learns of a
        request only after the step it was sent during, e.g. an open-loop arrival) keeps its time:
        it joins the next step, as it would have had it been submitted on time."""
        heapq.heappush(self._arrivals, (t, next(self._order), req))

    @property
    def pending(self) -> bool:
        """Requests submitted that have not reached the engine yet."""
        return bool(self._arrivals)

    def run_until(self, end_s: float) -> None:
        """Run steps until the clock passes ``end_s`` or nothing is left to do."""
        while self.now_s < end_s and self.advance(end_s):
            pass

    def advance(self, horizon_s: float = float("inf")) -> bool:
        """Run one step (an idle engine first waits for the next arrival, as the runner does);
        False when nothing is left to do, or the next arrival comes after ``horizon_s``."""
        self._horizon_s = horizon_s
        return self.loop.step(self)

    # -- the Clock of loadgen.engine_model.steploop ---------------------------------------------------------
    def now(self) -> float:
        return self.now_s

    def wait_for_arrival(self) -> float | None:
        arrivals = self._arrivals
        if not arrivals or arrivals[0][0] > self._horizon_s:
            return None
        now = self.now_s = max(self.now_s, arrivals[0][0])  # the runner wakes at the arrival
        while arrivals and arrivals[0][0] <= now:  # with every request arriving at that instant
            self._queue(heapq.heappop(arrivals)[2])
        return now

    def admit_arrivals(self, start: float) -> None:
        self._step_start_s = start
        arrivals = self._arrivals
        while arrivals and arrivals[0][0] < start:
            self._queue(heapq.heappop(arrivals)[2])

    def sleep_until(self, end: float) -> float:
        self.now_s = end
        return end

    def _queue(self, req: SimRequest) -> None:
        try:
            self.engine.submit(req)
        except QueueFull:
            self.rejected += 1
            self.on_chunk(req, 0, True, self.now_s)

    def _deliver(self, events: list[tuple[SimRequest, int, bool]], end: float) -> None:
        if self.record:
            start = self._step_start_s
            self.schedule.append(StepTrace(start, end - start, tuple((id(r), n, d) for r, n, d in events)))
        for req, n, done in events:
            self.on_chunk(req, n, done, end)
