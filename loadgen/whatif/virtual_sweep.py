"""A sweep played on the virtual-time engine: the run's own plan, ticked in simulated seconds.

Pure: no I/O, no wall clock (the simulated clock of ``loadgen.engine_model.virtual``). The stages follow the
run's ``loadgen.run.plan.SweepPlan``, built by ``plan_of`` from the scenario's ``stages`` section and
``slo`` objectives exactly as the run builds it: this module holds no rule of its own. It is the
plan's adapter, as ``loadgen.locust_face.shape.SweepShape`` is in a run: once a tick (``tick_s``, the run's
``TICK_S``; at the first engine step that ends at or after it) it observes the virtual run (users
started, measured requests finished and still running per stage, requests in flight, the SLO
outcomes of final stages for the search) and acts on the plan's events; after a ``WindowClosed`` it
ticks again at once, as the shape does. ``tick_s`` 0: the plan is ticked after every engine step,
and again at once while it has something to say (a rule acts at the instant it holds).

- closed loop: the plan's users start as Locust spawns them for the plan's spawn rate
  (``spawn_offsets``); a user whose request finishes sends the next one at once, as Locust's
  ``wait_time = constant(0)``; a refused request (a 4xx) pauses it ``client_error_pause_s``;
- open loop: one dispatcher (``users_for``: 1); requests arrive on the stage's seeded schedule
  (poisson, constant or gamma gaps: ``loadgen.whatif.virtual_workload``) from the tick the stage started;
- a request is measured when *sent* in a window, its tokens count toward throughput when they
  *arrive* in it; in the drain no request is sent.

The guard is not played (every stage is allowed): the what-if predicts the KV ceiling beside the
stages instead (``loadgen.whatif.summary``). Each request asks for the lengths its sender draws
(``loadgen.whatif.virtual_workload``: the scenario's distributions or dataset lines, seeded as the run
seeds them; loadgen forces the output length, so the simulator's early-EOS setting plays no part).
The engine holds each request's own KV (its prompt plus what it generated).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import random
from collections.abc import Callable
from functools import cache

from loadgen.config import StagesConfig, build_scenario
from loadgen.config.schema import DEFAULTS
from loadgen.engine_model.engine import EngineParams, SimRequest
from loadgen.engine_model.virtual import VirtualServer
from loadgen.phases import Phase
from loadgen.run import plan as run_plan
from loadgen.run.kv_guard import GuardDecision
from loadgen.run.plan import TICK_S
from loadgen.slo.early import live_counts
from loadgen.slo.objectives import Objectives, request_verdict
from loadgen.stats.stage_stats import bin_itl
from loadgen.whatif.rows import Timing, VirtualStage
from loadgen.whatif.virtual_workload import Sender, VirtualWorkload
from loadgen.workload.trace import TraceSchedule

IDLE_S = 0.01  # tick_s 0: an idle engine with nothing due sleeps this long between the plan's ticks
ERROR_PAUSE_S = DEFAULTS["request"]["client_error_pause_s"]


@cache
def _default_stages() -> StagesConfig:
    return build_scenario({}).stages


def stage_rules(**changes) -> StagesConfig:
    """The scenario's ``stages`` section: its defaults (``loadgen.config``) with ``changes``."""
    return dataclasses.replace(_default_stages(), **changes)


def _allow(load: float) -> GuardDecision:
    """The what-if's guard: every stage runs (the KV ceiling is predicted beside the stages)."""
    return GuardDecision(load, True, load, 0.0, None, "warn", False, "not played in the what-if")


def spawn_offsets(old: int, new: int, spawn_rate: float) -> list[float]:
    """When users ``old .. new-1`` start, seconds after the plan asked for them, as Locust starts
    them for the plan's (users, spawn_rate) (``loadgen.run.plan.Tick``): Locust's dispatcher starts
    k = max(1, floor(spawn_rate)) users at once every k / spawn_rate seconds, the first k at once
    (``locust.dispatch.UsersDispatcher``)."""
    if new <= old:
        return []
    per = max(1, math.floor(spawn_rate))
    return [(j // per) * (per / spawn_rate) for j in range(new - old)]


class _Sweep:
    """The virtual clients around one VirtualServer, and the plan's adapter (``play``)."""

    def __init__(self, params: EngineParams, workload: VirtualWorkload, open_loop: bool = False,
                 jitter_s: float = 0.0, part: int = 0, parts: int = 1, max_model_len: int | None = None,
                 error_pause_s: float = ERROR_PAUSE_S, judge: Callable[[VirtualStage], bool | None] | None = None,
                 objectives: Objectives | None = None):
        self.rng, self.jitter_s, self.error_pause_s = random.Random(params.seed), jitter_s, error_pause_s
        self.server = VirtualServer(params, self._on_chunk)
        self.workload, self.part, self.parts, self.max_model_len = workload, part, parts, max_model_len
        self.open_loop, self.judge = open_loop, judge
        self.objectives = objectives if objectives is not None and objectives.enabled else None
        self.cursor = workload.cursor(part, parts)  # the dataset, shared by every sender
        self.senders: dict[int, Sender] = {}  # user index -> its asks (the open-loop dispatcher: 0)
        self.timing: dict[int, Timing] = {}  # id(SimRequest) -> Timing, requests in flight
        self.user_of: dict[int, int] = {}  # id(SimRequest) -> user index (closed loop)
        self.users = 0  # users wanted; a user above it stops after its request
        self.starts: list[tuple[float, int]] = []  # closed loop: users still to start (time, user), in order
        self.schedule = None  # open loop: this stage's arrivals (loadgen.whatif.virtual_workload)
        self.stage_t0 = 0.0
        self.due: tuple[float, object] | None = None  # open loop: the next arrival (time, trace line)
        self.measuring: VirtualStage | None = None
        self.records: list[VirtualStage] = []  # every stage the plan started, in order (index = position)
        self.finished = 0  # requests finished in the whole run
        self.finished_of: dict[int, int] = {}  # stage -> its measured requests finished
        self.running_of: dict[int, int] = {}  # stage -> its measured requests still running
        self.outcomes: list[tuple[float, bool]] = []  # (load, passed) of final stages judged (the search)
        self.preempted_at_open = 0
        self.draining = self.done = False

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
        timing = Timing(t, st.index if st is not None else None, input_tokens=n_in, output_tokens=n_out,
                        model=sender.model())
        if st is not None:
            st.requests.append(timing)
            self.running_of[st.index] = self.running_of.get(st.index, 0) + 1
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
                if timing.model is not None:
                    st.model(timing.model).window_tokens += n
        elif not timing.too_long:
            timing.rejected = True
        if not done:
            return
        timing.done = True
        del self.timing[id(req)]
        self.finished += 1
        if self.measuring is not None and not timing.failed:
            self.measuring.window_finished += 1
            if timing.model is not None:
                self.measuring.model(timing.model).window_finished += 1
        if timing.stage is not None:  # a measured request: counted in its stage as the run's collector does
            self.running_of[timing.stage] -= 1
            self.finished_of[timing.stage] = self.finished_of.get(timing.stage, 0) + 1
            result = timing.result()
            verdict = request_verdict(result, self.objectives) if self.objectives is not None else None
            rec = self.records[timing.stage]
            counted = (rec.stats,) if timing.model is None else (rec.stats, rec.model(timing.model).stats)
            itl = bin_itl(result) if len(counted) > 1 else None  # binned once for both, as the run's Collector
            for stats in counted:
                stats.add_result(result, timing.input_tokens, timing.output_tokens, itl, verdict=verdict)
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

    # -- the plan's adapter ------------------------------------------------------------------------
    def play(self, plan: run_plan.SweepPlan, tick_s: float) -> list[VirtualStage]:
        """Tick ``plan`` on the simulated clock until the sweep is done; the stages it ran."""
        server, checked = self.server, -1
        while True:
            now = server.now_s
            if tick_s:
                k = int(now / tick_s + 1e-9)
                if k > checked:  # the first step end at or after tick k: the shape's tick k
                    checked = k
                    self._tick(plan, k * tick_s, again=False)
                horizon = (checked + 1) * tick_s  # an idle engine sleeps to the next tick at most
            else:
                self._tick(plan, now, again=True)
                horizon = now + IDLE_S
            if self.done:
                return self.records
            self.release(horizon)
            if not server.advance(horizon):
                server.now_s = max(now, horizon)
            if (st := self.measuring) is not None:
                engine = server.engine
                if self.open_loop:  # the in-flight integral and peak (concurrency_mean, _max)
                    st.stats.inflight_us += int((server.now_s - now) * 1e6 * len(self.timing))
                    st.stats.inflight_peak = max(st.stats.inflight_peak, len(self.timing))
                st.peak_running = max(st.peak_running, engine.num_running)
                st.peak_waiting = max(st.peak_waiting, engine.num_waiting)
                st.peak_kv_tokens = max(st.peak_kv_tokens, engine.kv_used)

    def _tick(self, plan: run_plan.SweepPlan, t: float, again: bool) -> None:
        """The shape's tick: observe, tick the plan, act on its events; once more at once if the
        plan is closing a window (as the shape), or with ``again`` as long as it has events."""
        for _ in range(100 if again else 2):
            tick = plan.tick(self._observe(t))
            for ev in tick.events:
                self._on_event(ev, t)
            if tick.users is None:
                self.done = True
                return
            if not self.draining and not self.open_loop:
                self._want(tick.users, tick.spawn_rate)
            if not tick.events or not (again or plan.kind is Phase.CLOSING):
                return

    def _observe(self, t: float) -> run_plan.Observation:
        # Locust's user count: the users wanted less those it has yet to spawn
        users = (1 if self.schedule is not None else 0) if self.open_loop else \
            self.users - sum(1 for _, u in self.starts if u < self.users)
        return run_plan.Observation(now=t, users=users, finished=lambda k: self.finished_of.get(k, 0),
                           stage_done=lambda k: not self.running_of.get(k), idle=lambda: not self.timing,
                           finished_total=self.finished, inflight=len(self.timing),
                           slo_outcomes=lambda: list(self.outcomes), slo_live=self._live)

    def _live(self, k: int):
        """Stage k's SLO counts so far and its measured requests running (the early stop's look)."""
        stats = self.records[k].stats if k < len(self.records) else None
        return live_counts(stats, self.running_of.get(k, 0), self.objectives or Objectives())

    def _want(self, users: int, spawn_rate: float) -> None:
        """The plan's users: new ones start as Locust spawns them; above ``users`` they stop after
        their request (one asked back while its request still runs just goes on after it)."""
        if users > self.users:
            offsets = spawn_offsets(self.users, users, spawn_rate)
            at, running = self.server.now_s, set(self.user_of.values())
            self.starts += [(at + off, u) for u, off in zip(range(self.users, users), offsets, strict=True)
                            if u not in running]
        self.users = users

    def _on_event(self, ev, t: float) -> None:
        engine = self.server.engine
        if isinstance(ev, run_plan.PhaseStarted) and ev.phase is Phase.RAMP:
            load = ev.concurrency
            rec = VirtualStage(ev.stage, None if self.open_loop else int(load),
                              float(load) if self.open_loop else None, search=ev.search)
            self.records.append(rec)
            if self.open_loop:  # the new rate's schedule starts at the stage's tick
                self.start_stage_arrivals(float(load), ev.stage, t)
        elif isinstance(ev, run_plan.PhaseStarted) and ev.phase is Phase.DRAIN:
            self.draining, self.users = True, 0
            self.stop_arrivals()
        elif isinstance(ev, run_plan.WindowOpened):
            rec = self.records[ev.stage]
            rec.window_start_s, rec.warmup_capped, self.measuring = ev.t, ev.capped, rec
            self.preempted_at_open = engine.stats.preemptions_total
        elif isinstance(ev, run_plan.WindowClosed):
            rec = self.records[ev.stage]
            rec.window_s, rec.early, self.measuring = ev.t - rec.window_start_s, ev.early, None
            rec.preemptions = engine.stats.preemptions_total - self.preempted_at_open
        elif isinstance(ev, run_plan.StageFinal) and self.judge is not None:
            rec = self.records[ev.stage]
            if (passed := self.judge(rec)) is not None:
                self.outcomes.append((rec.rate_per_s if self.open_loop else rec.concurrency, passed))
        elif isinstance(ev, run_plan.SweepDone):
            self.done = True


def run_sweep(params: EngineParams, loads: list[float], input_tokens: int = 1000, output_tokens: int = 1000,
              stages: StagesConfig | None = None, objectives: Objectives | None = None, open_loop: bool = False,
              jitter_s: float = 0.0, workload: VirtualWorkload | None = None, part: int = 0, parts: int = 1,
              max_model_len: int | None = None, tick_s: float = TICK_S, error_pause_s: float = ERROR_PAUSE_S,
              judge: Callable[[VirtualStage], bool | None] | None = None) -> list[VirtualStage]:
    """Play the stages ``loads`` (concurrencies, or with ``open_loop`` rates in requests/s) on one
    engine as the run's plan runs them (``stages``: the scenario's section, default its defaults;
    ``objectives``: its ``slo``, which isolates the stages and may add search stages and early
    stops); returns each stage's record. ``judge``: whether a final stage's requests passed the SLO
    (None: not judged), read by the search. ``workload``: what each request asks for and when
    open-loop requests arrive (default: ``input_tokens`` / ``output_tokens`` fixed, constant gaps);
    ``part`` of ``parts``: one replica's share (its own draws; ``loads`` are this replica's).
    ``jitter_s``: each request reaches the server a seeded uniform 0 .. jitter_s after it was sent
    (a client's turnaround; 0: at once). ``max_model_len``: a request longer than it (input + output)
    is answered 400 at once, as the server does."""
    workload = workload or VirtualWorkload.fixed(input_tokens, output_tokens)
    sw = _Sweep(params, workload, open_loop, jitter_s, part, parts, max_model_len, error_pause_s, judge, objectives)
    plan = run_plan.plan_of(loads, stages or _default_stages(), objectives or Objectives(), _allow,
                   users_for=(lambda rate: 1) if open_loop else None)
    return sw.play(plan, tick_s)
