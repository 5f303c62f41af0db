"""Open-loop load: requests sent on a schedule of arrivals, whatever the server is doing.

Design (why it looks like this):

- **One dispatcher user per load-generating process** (``RateUser``), not one Locust user per
  possible request: the shape asks for as many users as there are processes (workers, or 1 locally),
  so Locust's runner, stats, web UI and master/worker distribution all keep working, and the users
  count stays small whatever the rate. Each dispatcher takes its share of the stage's rate,
  ``ArrivalSpec.for_part(part, parts)``: parts add up to the offered rate exactly, each an
  independent stream (loadgen.workload.arrivals). The master's ``llm_phase`` message carries the rate and
  the list of processes that share it (loadgen.fleet.distributed); a second dispatcher in the same
  process (Locust rebalancing users after a worker loss) stays idle, so no share is sent twice.
- **One greenlet per request in flight**, from a gevent ``Pool`` of ``rate.max_inflight``: memory
  and CPU follow the requests really running. A request that comes due while the pool is full is
  counted ``dropped_by_client`` and not sent: delaying it would hide the overload we measure.
- **Keep-alive connections from a free list** of ``StreamClient``s: a request takes an idle client
  (its connection already open) or makes a new one, and gives it back when done. Opening a TCP
  connection per request would add a handshake to every TTFT and churn ports at high rates.
- **Time from the schedule**: a request's ``RequestRecord.sent_s`` is its *scheduled* time, so TTFT
  and E2E include the client's lateness and the server's queueing, as a user in line sees them
  (no coordinated omission). The lateness itself, t(actual send) - t(scheduled), goes into its own
  histogram (``schedule_lateness_s``); a stage whose lateness p99 reaches
  ``client_check.lateness_p99_s_max`` is flagged ``client_bound``.
- **Due from the stage's start**: a stage's arrivals are due at t(stage start) + the schedule's
  times, the stage start being when this process adopted the stage (its ramp,
  ``Runtime.stage_started_s``), not when the loop got around to it. So the warmup holds the arrivals
  the schedule says, and a seeded stage sends the same arrivals at the same offsets in every run.
- The dispatcher never sleeps past a due time and never skips one: when behind (the loop starting
  late, e.g. the first stage's model discovery), it sends every overdue arrival at once (each is
  counted late). It re-reads the phase at least every 50 ms. An arrival is measured by its due
  time (``Runtime.measured_stage``): one due before the window opened is warmup even if a stall
  sent it after, so the window counts the arrivals the schedule put in it (none from before).
- ``RateUser`` derives from ``StreamUser``, which has no task: a Locust user runs one of its
  tasks *and its base classes'* at random, so a closed-loop task inherited here once made the
  dispatcher send 1, 2, ... closed-loop requests (p = 1/2, 1/4, ...) before its schedule began.
"""

from __future__ import annotations

import time

import gevent
from gevent.pool import Pool

from loadgen.locust_face.users import StreamUser, send_request
from loadgen.wire.client import StreamClient
from loadgen.wire.exchange import prepare
from loadgen.workload.arrivals import ArrivalSpec
from loadgen.workload.trace import TraceSchedule, is_trace

POLL_S = 0.05  # longest sleep between looks at the phase


class RateUser(StreamUser):
    """The open-loop dispatcher of one process (module docstring). Reuses ``StreamUser``'s setup
    (first client, prompts, model discovery and chat calibration); its one task is ``dispatch``."""

    _active: RateUser | None = None  # the one dispatcher of this process

    def on_start(self) -> None:
        super().on_start()
        self.pool = Pool(self.rt.scenario.rate.max_inflight)
        # idle clients by the URL they talk to (hosts spread by the client: one list per replica)
        self.idle_clients: dict[str, list[StreamClient]] = {self.host: [self.client]}

    def on_stop(self) -> None:
        self.pool.kill(block=True, timeout=5)
        for clients in self.idle_clients.values():
            for client in clients:
                client.close()
        if RateUser._active is self:
            RateUser._active = None


    def _one(self, due_s: float, stage: int | None, line=None) -> None:
        """One arrival: a client from the free list, sent now, timed from ``due_s``; ``line``: the
        trace's dataset line due then (loadgen.workload.trace)."""
        rt, sc = self.rt, self.rt.scenario
        index, replica = rt.targets.pick()
        url = rt.targets.root(index, self.host)
        idle = self.idle_clients.setdefault(url, [])
        client = idle.pop() if idle else rt.stream_client(url)
        try:
            ask = self.prompts.next() if line is None else self.prompts.from_line(line)
            model, counted_as = self.next_model()
            body, ask = prepare(sc, model, rt.compat, ask)
            rt.collector.request_scheduled(stage, time.perf_counter() - due_s)
            send_request(self, client, body, ask, stage, sent_s=due_s, model=counted_as, replica=replica)
        finally:
            rt.targets.done(index)
            idle.append(client)

    def dispatch(self) -> None:
        rt = self.rt
        if RateUser._active not in (None, self):
            gevent.sleep(1.0)  # this process already has its dispatcher
            return
        RateUser._active = self
        if self.model is None or self.prompts is None:
            self._prepare()
        key, schedule, t0, due = None, None, 0.0, 0.0
        while True:
            if not rt.kind.sends_requests or rt.fatal_sent or rt.rate_per_s is None or rt.part is None:
                key = None
                gevent.sleep(POLL_S)
                continue
            now = time.perf_counter()
            if key != (rt.stage, rt.rate_per_s, rt.part, rt.parts):  # a new stage (or share)
                key = (rt.stage, rt.rate_per_s, rt.part, rt.parts)
                # due from the stage's start on this process, not from when this loop got here
                schedule, t0 = self._schedule(), rt.stage_started_s
                due, line = self._next(schedule, t0)
            if due > now:
                gevent.sleep(min(due - now, POLL_S))
                continue
            stage = rt.measured_stage(due)  # by its due time: late at the window's opening is warmup
            if self.pool.full():
                rt.collector.request_scheduled(stage, None)  # dropped_by_client, never delayed
            else:
                self.pool.spawn(self._one, due, stage, line)
            due, line = self._next(schedule, t0)

    def _schedule(self):
        """This stage's arrivals: the trace's lines (a timestamped dataset), else generated."""
        rt = self.rt
        if is_trace(rt.dataset):
            return TraceSchedule(rt.dataset, rt.part, rt.parts, rt.scenario.workload.trace_speedup)
        return arrival_spec(rt.scenario, rt.rate_per_s, rt.stage).for_part(rt.part, rt.parts)

    @staticmethod
    def _next(schedule, t0: float) -> tuple[float, object]:
        """(absolute due time, the trace line or None) of the next arrival; never, for a share
        with no trace lines."""
        if isinstance(schedule, TraceSchedule):
            got = schedule.next()
            return (float("inf"), None) if got is None else (t0 + got[0], got[1])
        return t0 + schedule.next_due_s(), None

    tasks = [dispatch]


def arrival_spec(scenario, rate_per_s: float, stage: int | None) -> ArrivalSpec:
    """The stage's arrivals (``ArrivalSpec.for_stage``: seeded by rate.seed and the stage)."""
    r = scenario.rate
    return ArrivalSpec.for_stage(rate_per_s, r.arrival, r.burstiness, r.seed, stage)
