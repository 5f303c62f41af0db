"""A sweep played on the virtual-time engine: each stage's requests and their timings, as a run sees them.

Pure: no I/O, no wall clock (the simulated clock of ``loadgen.sim.virtual``). The stages follow the
run plan's rules (``loadgen.run.plan``) in simulated seconds:

- closed loop: stage C runs C users (users carry over from the stage before; the new ones start
  as Locust spawns them for the plan's spawn rate, ``spawn_offsets``: spread over about
  ``ramp_s`` x new / C, or together when ``ramp_s`` is 0; a user whose request finishes sends the
  next one at once, as Locust's ``wait_time = constant(0)``); open loop: requests arrive on the
  stage's seeded schedule (poisson, constant or gamma gaps: ``loadgen.predict.vworkload``);
- ticks (``tick_s``, 1 s as ``shapes.sweep.SweepShape``): the rules below are checked once a tick
  (at the first engine step that ends at or after it), the ramp ends at the tick after the stage
  started, and the next stage starts at the tick the window closed. A window then opens about
  ``warmup_s`` + 1 s after a stage's users started, where a real run's does (``tick_s`` 0: at the
  instant a rule holds, a second earlier, when the users that started together are still closer);
- warmup: ``warmup_s``, and (turnover) until as many requests finished since the stage began as the
  stage holds (C, or in flight), at most ``max_warmup_s``;
- window: ``duration_s``, and (turnover) until as many of its measured requests finished, at most
  ``max_window_s``; a request is measured when *sent* in the window, its tokens count toward
  throughput when they *arrive* in it; the next stage begins when the window closes, or with
  ``isolated`` (a run with SLO objectives) once the stage's measured requests finished, its users
  still running meanwhile (the plan's ``closing``).

Each request asks for the lengths its sender draws (``loadgen.predict.vworkload``: the scenario's
distributions or dataset lines, seeded as the run seeds them; loadgen forces the output length, so
the simulator's early-EOS setting plays no part). The engine holds each request's own KV (its
prompt plus what it generated); nothing here assumes one length for all.
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass, field

from loadgen.config.schema import DEFAULTS
from loadgen.predict.vworkload import Sender, VirtualWorkload
from loadgen.sim.engine import EngineParams, SimRequest
from loadgen.sim.virtual import VirtualServer
from loadgen.workload.trace import TraceSchedule


@dataclass(frozen=True)
class StagePlan:
    """The run plan's timing rules, simulated seconds (``stages.*`` of a scenario)."""

    warmup_s: float = 30.0
    duration_s: float = 60.0
    turnover: bool = True
    max_warmup_s: float = 600.0
    max_window_s: float = 900.0
    isolated: bool = False  # SLO objectives set: stage k+1 starts once stage k's measured requests ended
    tick_s: float = 1.0  # the sweep shape's tick (SweepShape: 1 s): rules are checked on it; 0: at every step
    ramp_s: float = 0.0  # stages.ramp_s: a stage's new users start spread over it (0: together)
    min_requests: int = 0  # stages.min_requests: a window also holds this many finished measured requests
    # request.client_error_pause_s: a closed-loop user's pause after a refused request (a 4xx)
    client_error_pause_s: float = DEFAULTS["request"]["client_error_pause_s"]


@dataclass
class Timing:
    """One request as the client sees it: sent, and each chunk's arrival and tokens."""

    sent_s: float
    stage: int | None  # the stage whose window it was sent in; None: unmeasured
    chunk_t: list[float] = field(default_factory=list)
    chunk_n: list[int] = field(default_factory=list)
    done: bool = False
    rejected: bool = False  # max_queued: refused (a 503)
    input_tokens: int = 0  # the prompt's tokens, as asked
    too_long: bool = False  # input + output above max_model_len: refused (a 400)

    @property
    def failed(self) -> bool:
        return self.rejected or self.too_long

    @property
    def tokens(self) -> int:
        return sum(self.chunk_n)

    @property
    def ttft_s(self) -> float | None:
        return self.chunk_t[0] - self.sent_s if self.chunk_t else None

    @property
    def e2e_s(self) -> float | None:
        return self.chunk_t[-1] - self.sent_s if self.chunk_t else None

    @property
    def tpot_s(self) -> float | None:
        """(E2E - TTFT) / (N - 1), None when N < 2 (``loadgen.stats.records``)."""
        n = self.tokens
        return (self.chunk_t[-1] - self.chunk_t[0]) / (n - 1) if n >= 2 else None


@dataclass
class StageRecord:
    """What the virtual run saw of one stage: its load, window and measured requests."""

    index: int
    concurrency: int | None
    rate_per_s: float | None
    window_start_s: float = 0.0
    window_s: float = 0.0
    window_tokens: int = 0  # output tokens whose chunk arrived in the window
    window_finished: int = 0  # requests (measured or not) that finished in the window
    requests: list[Timing] = field(default_factory=list)
    preemptions: int = 0
    peak_running: int = 0
    peak_waiting: int = 0
    peak_kv_tokens: int = 0
    scheduled: int = 0  # open loop: arrivals that came due in the window (sent + dropped)
    dropped: int = 0  # open loop: arrivals not sent, rate.max_inflight requests already in flight



def spawn_offsets(old: int, new: int, ramp_s: float) -> list[float]:
    """When users ``old .. new-1`` start, seconds after the stage's ramp began, as Locust starts them
    for the plan's (users, spawn_rate): the plan asks spawn_rate = max(new / ramp_s, 1) users/s
    (``loadgen.run.plan.SweepPlan.tick``; every user at once when ramp_s is 0), and Locust's
    dispatcher starts k = max(1, floor(spawn_rate)) users at once every k / spawn_rate seconds,
    the first k at once (``locust.dispatch.UsersDispatcher``)."""
    if new <= old:
        return []
    if ramp_s <= 0:
        return [0.0] * (new - old)
    rate = max(new / ramp_s, 1.0)
    per = max(1, math.floor(rate))
    return [(j // per) * (per / rate) for j in range(new - old)]


class _Sweep:
    """The virtual clients and the stage bookkeeping around one VirtualServer."""

    def __init__(self, params: EngineParams, workload: VirtualWorkload, jitter_s: float = 0.0,
                 part: int = 0, parts: int = 1, max_model_len: int | None = None, error_pause_s: float = 1.0):
        self.rng, self.jitter_s, self.error_pause_s = random.Random(params.seed), jitter_s, error_pause_s
        self.server = VirtualServer(params, self._on_chunk)
        self.workload, self.part, self.parts, self.max_model_len = workload, part, parts, max_model_len
        self.cursor = workload.cursor(part, parts)  # the dataset, shared by every sender
        self.senders: dict[int, Sender] = {}  # user index -> its asks (the open-loop dispatcher: 0)
        self.timing: dict[int, Timing] = {}  # id(SimRequest) -> Timing, requests in flight
        self.user_of: dict[int, int] = {}  # id(SimRequest) -> user index (closed loop)
        self.users = 0  # users wanted; a user above it stops after its request
        self.starts: list[tuple[float, int]] = []  # closed loop: users still to start (time, user), in order
        self.schedule = None  # open loop: this stage's arrivals (loadgen.predict.vworkload)
        self.stage_t0 = 0.0
        self.due: tuple[float, object] | None = None  # open loop: the next arrival (time, trace line)
        self.measuring: StageRecord | None = None
        self.finished = 0  # requests finished in the whole run
        self.finished_measured = 0  # measured requests of the open window finished
        self.phase_at = 0.0  # when the last phase ended (a tick): the next stage starts then

    def _sender(self, user: int) -> Sender:
        if user not in self.senders:
            self.senders[user] = self.workload.sender(user, self.cursor, self.part, self.parts)
        return self.senders[user]

    def send(self, t: float, user: int | None = None, line=None) -> None:
        """A request sent at ``t`` by ``user`` (None: the open-loop dispatcher, user 0), its lengths
        the sender's next (or the trace ``line``'s)."""
        sender = self._sender(0 if user is None else user)
        n_in, n_out = sender.next() if line is None else sender.line(line)
        req = SimRequest(n_in, n_out)
        st = self.measuring
        timing = Timing(t, st.index if st is not None else None, input_tokens=n_in)
        if st is not None:
            st.requests.append(timing)
        if user is not None:
            self.user_of[id(req)] = user
        if self.max_model_len is not None and n_in + n_out > self.max_model_len:
            timing.too_long = True  # the server answers 400 at once (loadgen.sim.request)
            self.timing[id(req)] = timing
            self._on_chunk(req, 0, True, t)
            return
        self.timing[id(req)] = timing
        self.server.submit(req, t + self.rng.uniform(0.0, self.jitter_s) if self.jitter_s else t)

    def _on_chunk(self, req: SimRequest, n: int, done: bool, t: float) -> None:
        timing = self.timing[id(req)]
        if n:
            timing.chunk_t.append(t)
            timing.chunk_n.append(n)
            st = self.measuring
            if st is not None:
                st.window_tokens += n
        elif not timing.too_long:
            timing.rejected = True
        if not done:
            return
        timing.done = True
        del self.timing[id(req)]
        self.finished += 1
        if self.measuring is not None:
            self.measuring.window_finished += 0 if timing.failed else 1
            if timing.stage == self.measuring.index:
                self.finished_measured += 1
        user = self.user_of.pop(id(req), None)
        if user is not None and user < self.users:
            if timing.too_long:  # a refused request: the user pauses (request.client_error_pause_s)
                bisect.insort(self.starts, (t + self.error_pause_s, user))
            else:
                self.send(t, user)

    # -- requests that start later: a ramp's users, open-loop arrivals ------------------------------
    def start_stage_arrivals(self, rate_per_s: float, index: int, t0: float) -> None:
        """Open loop: stage ``index``'s schedule from ``t0`` replaces the last stage's (the
        dispatcher drops the old schedule's next due time when the stage changes)."""
        self.schedule, self.stage_t0 = self.workload.arrivals(rate_per_s, index, self.part, self.parts), t0
        self._next_due()

    def stop_arrivals(self) -> None:
        self.schedule = self.due = None

    def _next_due(self) -> None:
        if isinstance(self.schedule, TraceSchedule):
            got = self.schedule.next()
            self.due = None if got is None else (self.stage_t0 + got[0], got[1])
        else:
            self.due = (self.stage_t0 + self.schedule.next_due_s(), None)

    def _next_pending(self) -> float:
        return min(self.starts[0][0] if self.starts else math.inf, self.due[0] if self.due else math.inf)

    def release(self, horizon_s: float) -> None:
        """Send every user start and arrival due by now, before the next step is computed (a request
        sent during a step joins the step after it, at its own send time); an idle engine with
        nothing queued first waits for the next one (not past ``horizon_s``)."""
        server = self.server
        until = server.now_s
        if server.engine.idle and not server.pending:
            until = max(until, min(self._next_pending(), horizon_s))
        while self.starts and self.starts[0][0] <= until:
            t, user = self.starts.pop(0)
            if user < self.users:
                self.send(t, user)
        while self.due is not None and self.due[0] <= until:
            t, line = self.due
            st, cap = self.measuring, self.workload.max_inflight
            if st is not None:
                st.scheduled += 1
            if cap is not None and len(self.timing) >= -(-cap // self.parts):  # the dispatcher's pool is full
                if st is not None:
                    st.dropped += 1  # dropped_by_client, never delayed
            else:
                self.send(t, line=line)
            self._next_due()

    def advance_to(self, end_s: float, until, cap_s: float, tick_s: float = 0.0) -> float:
        """Run until ``end_s`` has passed and ``until()`` holds, or ``cap_s`` passed; returns the time
        the rule held. With ``tick_s`` the rule is checked once per tick (at the first step end at or
        after it, as the sweep shape observes the run once a second) and the time returned is the tick's."""
        server = self.server
        checked = -1  # the last tick checked
        while True:
            now = server.now_s
            if tick_s:
                k = int(now / tick_s + 1e-9)
                at = k * tick_s
                if k > checked:
                    checked = k
                    if (at >= end_s and until()) or at >= cap_s:
                        return at
            elif (now >= end_s and until()) or now >= cap_s:
                return now
            horizon = end_s if now < end_s else cap_s
            if tick_s:
                horizon = min(horizon, (checked + 1) * tick_s)  # an idle engine sleeps to the next tick at most
            self.release(horizon)
            if not server.advance(horizon):
                if now >= end_s and not tick_s:
                    return now  # idle with nothing due before the cap: nothing more can finish
                server.now_s = max(now, horizon)
            st, engine = self.measuring, server.engine
            if st is not None:
                st.peak_running = max(st.peak_running, engine.num_running)
                st.peak_waiting = max(st.peak_waiting, engine.num_waiting)
                st.peak_kv_tokens = max(st.peak_kv_tokens, engine.kv_used)


def run_sweep(params: EngineParams, loads: list[float], input_tokens: int = 1000, output_tokens: int = 1000,
              plan: StagePlan = StagePlan(), open_loop: bool = False, jitter_s: float = 0.0,
              workload: VirtualWorkload | None = None, part: int = 0, parts: int = 1,
              max_model_len: int | None = None) -> list[StageRecord]:
    """Play the stages ``loads`` (concurrencies, or with ``open_loop`` rates in requests/s) one
    after the other on one engine, as a run does; returns each stage's record. ``workload``: what
    each request asks for and when open-loop requests arrive (default: ``input_tokens`` /
    ``output_tokens`` fixed, constant gaps); ``part`` of ``parts``: one replica's share (its own
    draws; ``loads`` are this replica's). ``jitter_s``: each request reaches the server a seeded
    uniform 0 .. jitter_s after it was sent (a client's turnaround; 0: at once). ``max_model_len``:
    a request longer than it (input + output) is answered 400 at once, as the server does."""
    workload = workload or VirtualWorkload.fixed(input_tokens, output_tokens)
    sw = _Sweep(params, workload, jitter_s, part, parts, max_model_len, plan.client_error_pause_s)
    server = sw.server
    records = [_play_stage(sw, index, load, plan, open_loop) for index, load in enumerate(loads)]
    # the drain: no new requests; the last stage's measured ones finish (their figures need their ends)
    sw.users = 0
    sw.stop_arrivals()
    if records:
        last = records[-1]
        sw.advance_to(server.now_s, lambda: all(t.done for t in last.requests), server.now_s + plan.max_window_s,
                      plan.tick_s)
    return records


def _play_stage(sw: _Sweep, index: int, load: float, plan: StagePlan, open_loop: bool) -> StageRecord:
    """Ramp, warmup, window: the stage's record. The stage starts at the tick the last one's window
    closed (``sw.phase_at``). The ramp: open loop, the new rate's schedule starts then; closed loop,
    the new users start as Locust spawns them (``spawn_offsets``; all at once when ``ramp_s`` is 0),
    and with ticks the ramp ends at the first tick after the last of them started (the shape sees
    them running); every rule after is checked on the tick."""
    server, tick = sw.server, plan.tick_s
    start = sw.phase_at
    finished_at_start = sw.finished
    last_start = 0.0
    if open_loop:
        rec = StageRecord(index, None, float(load))
        sw.start_stage_arrivals(float(load), index, start)

        def hold() -> int:  # the open-loop turnover counts against the requests in flight
            return max(1, len(sw.timing))
    else:
        rec = StageRecord(index, int(load), None)
        old, sw.users = sw.users, int(load)
        offsets = spawn_offsets(old, sw.users, plan.ramp_s)
        sw.starts += [(server.now_s + off, user) for user, off in zip(range(old, sw.users), offsets, strict=True)]
        last_start = offsets[-1] if offsets else 0.0

        def hold() -> int:
            return sw.users
    on = plan.turnover
    # the ramp ends at the first tick after the last user started (at once without ticks)
    warm_from = start + (tick * (math.floor(last_start / tick + 1e-9) + 1) if tick else last_start)
    t0 = sw.advance_to(warm_from + plan.warmup_s, lambda: not on or sw.finished - finished_at_start >= hold(),
                       warm_from + max(plan.max_warmup_s, plan.warmup_s), tick)
    rec.window_start_s = t0
    preempted_before = server.engine.stats.preemptions_total
    sw.measuring, sw.finished_measured = rec, 0

    def closes() -> bool:  # the window's turnover, and the plan's min_requests measured requests finished
        return (not on or sw.finished_measured >= hold()) and sw.finished_measured >= plan.min_requests

    sw.phase_at = sw.advance_to(t0 + plan.duration_s, closes, t0 + max(plan.max_window_s, plan.duration_s), tick)
    rec.window_s = sw.phase_at - t0
    rec.preemptions = server.engine.stats.preemptions_total - preempted_before
    sw.measuring = None
    if plan.isolated:
        now = sw.phase_at
        sw.phase_at = sw.advance_to(now, lambda: all(t.done for t in rec.requests), now + plan.max_window_s, tick)
    return rec
