"""Drive a pure timing model in real time: one greenlet serves every request.

Simulated time runs ``time_scale`` times faster than wall time: a step of ``d`` simulated seconds
takes ``d / time_scale`` wall seconds. Deadlines are computed from the schedule, not from when the
greenlet woke, so sleep jitter (gevent timers have ~1 ms granularity) does not accumulate.

Overruns (``llmsim_step_overruns_total``) mean the simulator fell behind its own clock:
- engine: a step whose work (delivering the previous step's chunks + computing this one) took
  longer than its scaled duration; the schedule then restarts from now, so simulated time lags.
- fixed: a timer pass that began more than ``FIXED_LATE_S`` after the chunk it serves was due.
"""

from __future__ import annotations

import logging
from time import perf_counter

import gevent
from gevent.event import Event

from loadgen.engine_model.engine import Engine, SimRequest
from loadgen.engine_model.fixed import FixedSchedule
from loadgen.engine_model.steploop import Deliver, StepLoop

log = logging.getLogger("loadgen.sim")

FIXED_LATE_S = 0.005
FIXED_COALESCE_S = 0.0002  # serve chunks due within this much wall time in the same pass


class Runner:
    def __init__(self, model: Engine | FixedSchedule, time_scale: float, deliver: Deliver):
        self.model = model
        self.time_scale = time_scale
        self.deliver = deliver
        self.overruns_total = 0
        self._wake = Event()
        self._t0 = perf_counter()
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        self._greenlet = gevent.spawn(self._guarded)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)

    def now_s(self) -> float:
        """Simulated seconds since start."""
        return (perf_counter() - self._t0) * self.time_scale

    def submit(self, req: SimRequest) -> None:
        """Hand ``req`` to the model (Engine may raise QueueFull) and wake the loop."""
        self._submit(req)
        self._wake.set()

    def abort(self, req: SimRequest) -> None:
        self.model.abort(req)

    def _guarded(self) -> None:
        try:
            self._loop()
        except gevent.GreenletExit:
            raise
        except Exception:  # a dead runner would hang every client: say why, loudly
            log.exception("simulator runner crashed")
            raise

    def _submit(self, req: SimRequest) -> None:
        raise NotImplementedError

    def _loop(self) -> None:
        raise NotImplementedError


class EngineRunner(Runner):
    """The wall-time ``Clock`` of ``loadgen.engine_model.steploop.StepLoop``: requests are queued as they
    arrive (``submit``), an idle engine sleeps until one wakes it, a step sleeps out its scaled
    duration (an overrun when it is already late: the schedule restarts from now)."""

    model: Engine

    def __init__(self, model: Engine, time_scale: float, deliver: Deliver):
        super().__init__(model, time_scale, deliver)
        self.loop = StepLoop(model, deliver, time_scale)

    @property
    def steps_total(self) -> int:
        return self.loop.steps_total

    def _submit(self, req: SimRequest) -> None:
        self.model.submit(req)

    def now(self) -> float:
        return perf_counter()

    def wait_for_arrival(self) -> float:
        self._wake.clear()
        self._wake.wait()
        return perf_counter()

    kv_leak_per_s = 0.0  # drift_kv_leak_tokens_per_h / 3600: KV tokens lost per simulated second
    kv_lost_max = 0  # never so much that one request of max_model_len no longer fits

    def admit_arrivals(self, start: float) -> None:
        # submit() queued each request as it arrived; a leak has taken its share of the pool by now
        if self.kv_leak_per_s:
            self.model.kv_lost = min(int(self.kv_leak_per_s * (start - self._t0) * self.time_scale), self.kv_lost_max)

    def sleep_until(self, end: float) -> float:
        now = perf_counter()
        if end > now:
            gevent.sleep(end - now)
            return end
        self.overruns_total += 1
        return now

    def _loop(self) -> None:
        while True:
            self.loop.step(self)


class FixedRunner(Runner):
    model: FixedSchedule
    steps_total = 0  # timer passes

    def _submit(self, req: SimRequest) -> None:
        self.model.submit(req, self.now_s())

    def _loop(self) -> None:
        model, scale, t0 = self.model, self.time_scale, self._t0
        while True:
            self._wake.clear()
            due = model.next_due()
            if due is None:
                self._wake.wait()
                continue
            delay = t0 + due / scale - perf_counter()
            if delay > FIXED_COALESCE_S:
                # Wake early if a new request brings an earlier deadline.
                self._wake.wait(delay)
                continue
            if -delay > FIXED_LATE_S:
                self.overruns_total += 1
            self.steps_total += 1
            now = perf_counter()
            self.deliver(model.pop_due((now - t0 + FIXED_COALESCE_S) * scale), now)
