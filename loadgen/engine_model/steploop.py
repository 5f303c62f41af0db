"""The engine's step loop, whatever the clock: the one place that decides which requests join which
step, when a step starts and ends, and when its chunks are delivered.

Pure: the loop owns no clock. A ``Clock`` passes time for it; the HTTP simulator's
``loadgen.sim.runner.EngineRunner`` sleeps in wall time (gevent), ``loadgen.engine_model.virtual.VirtualServer``
advances a number. They differ only in how time passes and how arrivals reach the engine:

1. An idle engine waits for work (``Clock.wait_for_arrival``); the step starts at that arrival.
   Otherwise the step starts where the last one ended (or later, when the clock fell behind).
2. Every request that arrived *strictly before* the step starts is in the engine's queue when the
   step is computed (``Clock.admit_arrivals``: over HTTP a request is queued as it arrives, so that
   is a no-op; in virtual time the arrivals wait in a heap until then), so it may join this step.
3. The step is computed at its start (``Engine.step()``), which fixes its duration and its chunks;
   a request admitted for the first time gets ``t_scheduled`` = the step's start (its queue time ends).
4. The clock passes the step's duration (``duration_s / time_scale``); a request that arrives
   meanwhile joins a later step, never this one.
5. At the step's end its chunks are delivered (``deliver(events, now)``), then the next step is
   computed at once: a closed-loop user whose request finished with step n sends its next one while
   step n+1 runs, and it joins step n+2.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from loadgen.engine_model.engine import Engine, SimRequest

Deliver = Callable[[list[tuple[SimRequest, int, bool]], float], None]


class Clock(Protocol):
    def now(self) -> float:
        """The clock's time (wall seconds over HTTP, simulated seconds in virtual time)."""

    def wait_for_arrival(self) -> float | None:
        """Block until a request is in the engine's queue (or due); return the time the idle engine
        wakes, or None when nothing will arrive (virtual time: not before its horizon)."""

    def admit_arrivals(self, start: float) -> None:
        """Queue every request that arrived strictly before ``start`` (the step about to be computed)."""

    def sleep_until(self, end: float) -> float:
        """Let time pass until ``end``; return when the next step starts: ``end``, or later when
        the clock fell behind its schedule."""


class StepLoop:
    """One engine, stepped by rules 1-5 of the module docstring on whatever ``Clock`` is given."""

    def __init__(self, engine: Engine, deliver: Deliver, time_scale: float = 1.0):
        self.engine = engine
        self.deliver = deliver
        self.time_scale = time_scale
        self.steps_total = 0
        self._next_start: float | None = None  # where the next step starts; None: at the next arrival

    def step(self, clock: Clock) -> bool:
        """Run one step on ``clock`` (an idle engine first waits for an arrival). False when the
        engine was idle and nothing arrived (``wait_for_arrival`` returned None)."""
        engine = self.engine
        if engine.idle:
            woke = clock.wait_for_arrival()
            if woke is None:
                return False
            start = woke
        else:
            start = clock.now() if self._next_start is None else self._next_start
        clock.admit_arrivals(start)
        duration_s, events = engine.step()
        for req in engine.admitted:  # its queue time ends as this step starts (the metrics' clock)
            req.t_scheduled = start
        end = start + duration_s / self.time_scale
        self._next_start = clock.sleep_until(end)
        self.steps_total += 1
        self.deliver(events, clock.now())
        return True
