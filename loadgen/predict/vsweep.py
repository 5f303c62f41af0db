"""A sweep played on the virtual-time engine: each stage's requests and their timings, as a run sees them.

Pure: no I/O, no wall clock (the simulated clock of ``loadgen.sim.virtual``). The stages follow the
run plan's rules (``loadgen.run.plan``) in simulated seconds:

- closed loop: stage C runs C users (users carry over from the stage before; the new ones start
  together, as Locust spawns a stage's users at once when ``ramp_s`` is 0; a user whose request
  finishes sends the next one at once, as Locust's ``wait_time = constant(0)``); open loop: requests
  arrive at a fixed rate, evenly spaced (the prediction of a mean, not of Poisson bursts);
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

Every request asks for exactly ``input_tokens`` and ``output_tokens`` (loadgen forces the output
length), so the simulator's early-EOS setting plays no part.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from loadgen.sim.engine import EngineParams, SimRequest
from loadgen.sim.virtual import VirtualServer


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


@dataclass
class Timing:
    """One request as the client sees it: sent, and each chunk's arrival and tokens."""

    sent_s: float
    stage: int | None  # the stage whose window it was sent in; None: unmeasured
    chunk_t: list[float] = field(default_factory=list)
    chunk_n: list[int] = field(default_factory=list)
    done: bool = False
    rejected: bool = False

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


class _Sweep:
    """The virtual clients and the stage bookkeeping around one VirtualServer."""

    def __init__(self, params: EngineParams, input_tokens: int, output_tokens: int, jitter_s: float = 0.0):
        self.rng, self.jitter_s = random.Random(params.seed), jitter_s
        self.server = VirtualServer(params, self._on_chunk)
        self.input_tokens, self.output_tokens = input_tokens, output_tokens
        self.timing: dict[int, Timing] = {}  # id(SimRequest) -> Timing, requests in flight
        self.user_of: dict[int, int] = {}  # id(SimRequest) -> user index (closed loop)
        self.users = 0  # users wanted; a user above it stops after its request
        self.gap_s: float | None = None  # open loop: time between arrivals
        self.next_arrival_s = 0.0
        self.last_arrival_s = -1.0  # the latest arrival sent (open loop): one is always ahead of the clock
        self.measuring: StageRecord | None = None
        self.finished = 0  # requests finished in the whole run
        self.finished_measured = 0  # measured requests of the open window finished
        self.phase_at = 0.0  # when the last phase ended (a tick): the next stage starts then

    def send(self, t: float, user: int | None = None) -> None:
        req = SimRequest(self.input_tokens, self.output_tokens)
        st = self.measuring
        timing = Timing(t, st.index if st is not None else None)
        self.timing[id(req)] = timing
        if st is not None:
            st.requests.append(timing)
        if user is not None:
            self.user_of[id(req)] = user
        self.server.submit(req, t + self.rng.uniform(0.0, self.jitter_s) if self.jitter_s else t)

    def _on_chunk(self, req: SimRequest, n: int, done: bool, t: float) -> None:
        timing = self.timing[id(req)]
        if n:
            timing.chunk_t.append(t)
            timing.chunk_n.append(n)
            st = self.measuring
            if st is not None:
                st.window_tokens += n
        else:
            timing.rejected = True
        if not done:
            return
        timing.done = True
        del self.timing[id(req)]
        self.finished += 1
        if self.measuring is not None:
            self.measuring.window_finished += 0 if timing.rejected else 1
            if timing.stage == self.measuring.index:
                self.finished_measured += 1
        user = self.user_of.pop(id(req), None)
        if user is not None and user < self.users:
            self.send(t, user)

    def _feed_arrivals(self) -> None:
        """Open loop: send every arrival due by now, and the next one (an idle engine waits for it)."""
        if self.gap_s is None:
            return
        now = self.server.now_s
        while True:
            t = self.last_arrival_s = self.next_arrival_s
            self.send(t)
            self.next_arrival_s += self.gap_s
            if t > now:
                return

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
            if self.gap_s is not None and self.last_arrival_s <= now:
                self._feed_arrivals()  # the last arrival sent is due: send up to one in the future
            horizon = end_s if now < end_s else cap_s
            if tick_s:
                horizon = min(horizon, (checked + 1) * tick_s)  # an idle engine sleeps to the next tick at most
            if not server.advance(horizon):
                if now >= end_s and not tick_s:
                    return now  # idle with nothing due before the cap: nothing more can finish
                server.now_s = max(now, horizon)
            st, engine = self.measuring, server.engine
            if st is not None:
                st.peak_running = max(st.peak_running, engine.num_running)
                st.peak_waiting = max(st.peak_waiting, engine.num_waiting)
                st.peak_kv_tokens = max(st.peak_kv_tokens, engine.kv_used)


def run_sweep(params: EngineParams, loads: list[float], input_tokens: int, output_tokens: int,
              plan: StagePlan = StagePlan(), open_loop: bool = False, jitter_s: float = 0.0) -> list[StageRecord]:
    """Play the stages ``loads`` (concurrencies, or with ``open_loop`` rates in requests/s) one
    after the other on one engine, as a run does; returns each stage's record. ``jitter_s``: each
    request reaches the server a seeded uniform 0 .. jitter_s after it was sent (a client's turnaround;
    0: at once)."""
    sw = _Sweep(params, input_tokens, output_tokens, jitter_s)
    server = sw.server
    records = [_play_stage(sw, index, load, plan, open_loop) for index, load in enumerate(loads)]
    # the drain: no new requests; the last stage's measured ones finish (their figures need their ends)
    sw.users, sw.gap_s = 0, None
    if records:
        last = records[-1]
        sw.advance_to(server.now_s, lambda: all(t.done for t in last.requests), server.now_s + plan.max_window_s,
                      plan.tick_s)
    return records


def _play_stage(sw: _Sweep, index: int, load: float, plan: StagePlan, open_loop: bool) -> StageRecord:
    """Ramp (users or the rate change at once), warmup, window: the stage's record. The stage starts
    at the tick the last one's window closed (``sw.phase_at``); with ticks the ramp ends at the next
    tick (the shape sees the users running), and every rule after is checked on the tick."""
    server, tick = sw.server, plan.tick_s
    start = sw.phase_at
    finished_at_start = sw.finished
    if open_loop:
        rec = StageRecord(index, None, float(load))
        if sw.gap_s is None:
            sw.next_arrival_s = start
        sw.gap_s = 1.0 / float(load)

        def hold() -> int:  # the open-loop turnover counts against the requests in flight
            return max(1, len(sw.timing))
    else:
        rec = StageRecord(index, int(load), None)
        old, sw.users = sw.users, int(load)
        for user in range(old, sw.users):
            sw.send(server.now_s, user)

        def hold() -> int:
            return sw.users
    on = plan.turnover
    warm_from = start + tick  # the ramp: C users run at the next tick (at once without ticks)
    t0 = sw.advance_to(warm_from + plan.warmup_s, lambda: not on or sw.finished - finished_at_start >= hold(),
                       warm_from + max(plan.max_warmup_s, plan.warmup_s), tick)
    rec.window_start_s = t0
    preempted_before = server.engine.stats.preemptions_total
    sw.measuring, sw.finished_measured = rec, 0
    sw.phase_at = sw.advance_to(t0 + plan.duration_s, lambda: not on or sw.finished_measured >= hold(),
                                t0 + max(plan.max_window_s, plan.duration_s), tick)
    rec.window_s = sw.phase_at - t0
    rec.preemptions = server.engine.stats.preemptions_total - preempted_before
    sw.measuring = None
    if plan.isolated:
        now = sw.phase_at
        sw.phase_at = sw.advance_to(now, lambda: all(t.done for t in rec.requests), now + plan.max_window_s, tick)
    return rec
