"""The sweep's decisions, as a pure state machine: no Locust, no I/O, no clock of its own.

Each stage runs ``ramp -> warmup -> measure``; after the last stage ``drain`` waits for measured
requests still running, then the sweep is done. Before a stage starts, the guard decides whether it
may run (``decide(concurrency) -> GuardDecision``): abort stops before it, clamp runs one last
stage at the largest concurrency that fits, warn runs it flagged.

- ramp: ask for C users; ends when C users run, or after ``ramp_s`` × 4 + 10 s (so a lost worker
  cannot hang the sweep; the stage then records the users it really had).
- warmup: ``warmup_s`` seconds; requests sent now are not measured.
- turnover (``turnover``, on by default): the warmup also lasts until C requests finished since
  the stage's ramp began, and the window until C requests finished inside it — every stream turned
  over about once. Users start together and fixed-length requests keep them in step: the server
  alternates between a prefill burst and a decode-only batch, one cycle per request lifetime (a
  1000-token request at C=512 lives ~100 s). A window shorter than that cycle reports a phase of
  it, not the steady state. Capped at ``max_warmup_s`` / ``max_window_s``; a window opened by the
  cap before the turnover is marked (``WindowOpened.capped``, the stage flag ``warmup_capped``).
- measure: the window. Closes when ``duration_s`` has passed, at least ``min_requests`` measured
  requests finished (and the turnover rule holds), or at ``max_window_s`` whatever the count.
- early stop (``slo.early_stop``, loadgen.slo.early): in an SLO run (isolated stages), the
  window of any stage, sweep or search, also closes before ``duration_s`` as soon as the stage's
  pass/fail verdict is decided with ``slo.confidence`` from its live counts
  (``Observation.slo_live``: judged, met, running, per percentile limit the samples within it) --
  but never before ``min_requests`` and the turnover rule hold, so the knee still gets a window in
  which every stream turned over. The ``WindowClosed`` carries the verdict (``early``).
- closing: the window closed (``WindowClosed``). The adapter reads the server for it and may call
  ``stop(reason)``; the next ``tick`` (the adapter ticks again at once) starts the next stage, or
  the drain if told to stop. The plan itself never reads anything.
- A closed stage is *final* once none of its requests is still running (``stage_done(k)``);
  requests of stage k finish during stage k+1's ramp/warmup, which exclude them from k+1.
- isolated stages (SLO objectives set): stage k+1 starts only once stage k is final; until then
  the plan stays in ``closing`` with stage k's users running (nothing measured). Otherwise the last
  requests of stage k would finish under stage k+1's higher load, and one such request in a
  hundred already fails a 99 % attainment. The wait is bounded by ``drain_s``.
- SLO search (``slo.search``, loadgen.slo.search): after the last sweep stage (the whole geometric sweep
  runs first: the knee and the KV ceiling need its upper stages, and attainment need not fall
  monotonically, so a first failure does not end it), once every closed stage is final (pass/fail
  is known only then) the plan reads the outcomes (``Observation.slo_outcomes``, (concurrency,
  passed) of every final stage) and starts the bisection stage ``next_search_concurrency`` names,
  with the same guard decision, ramp, warmup and window rules, marked ``search`` in its
  ``PhaseStarted``; repeated until the bracket is within ``slo.resolution`` or
  ``slo.max_search_stages`` ran. A guard refusal ends the geometric sweep (``guard_abort``) but not
  the search below it (those stages fit). A search stage's ramp may lower the users (it ends once
  at most C run). In open-loop mode the search bisects the offered rate (``rate=True``:
  midpoints to 3 significant digits, no one-user step in the resolution).
- drain: after the last window, no new requests; ends when every closed stage is final and no
  request at all is running (``idle()``: unmeasured ones too, so every request sent is counted,
  e.g. against a server's own counters), or after ``drain_s``.

Open-loop mode (``users_for`` given): a stage's load is a rate in requests/s, not a concurrency.
The same rules run it, with two differences. Users are the dispatchers, ``users_for(rate)`` (one per
load-generating process), so the ramp ends as soon as they run. And the turnover counts against the
requests *in flight* (``Observation.inflight``) instead of C: the warmup lasts until as many
requests finished since the ramp as are in flight (at least one), and the window until as many
finished inside it. By Little's law a stage at rate r with requests lasting W holds r x W in
flight, so the warmup ends about 2 W after the ramp (the population filled, then turned over once)
and the window holds at least one request lifetime: the same "every stream turned over" as C
finished requests in a closed loop, where in flight = C.

``tick(obs)`` returns the users wanted (None = stop) and the events for the adapter to act on:
small frozen dataclasses (``PhaseStarted``, ``GuardDecided``, ``WindowOpened``, ``WindowClosed``,
``StageFinal``, ``SweepDone``), matched by type. The adapters tick it every ``TICK_S``: a phase
lasts up to one tick longer than its rule asks (a ramp at least one tick).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from loadgen.phases import Phase
from loadgen.run.kv_guard import GuardDecision
from loadgen.slo.early import EarlyStop, EarlyVerdict, LiveCounts
from loadgen.slo.objectives import Objectives
from loadgen.slo.search import next_search_concurrency

# How often the plan is ticked, in seconds, by the run (loadgen.locust_face.shape: Locust's own shape
# loop ticks once a second; ours, 5 times) and by the what-if (loadgen.whatif.virtual_sweep).
TICK_S = 0.2
# A phase's elapsed time counts this much more, so a rule due at a tick holds at it although the
# tick's time is a sum of floats (the what-if's 301 x 0.2 s - 0.2 s is not exactly 60 s).
CLOCK_SLACK_S = 1e-9


@dataclass(frozen=True)
class Observation:
    now: float  # seconds since the run started
    users: int  # users running now
    finished: Callable[[int], int]  # measured requests of stage k finished so far
    stage_done: Callable[[int], bool]  # no request of stage k still running (everywhere)
    idle: Callable[[], bool] = lambda: True  # no request of any stage still running (everywhere)
    finished_total: int = 0  # every request finished so far in the run (measured or not)
    inflight: int = 0  # requests running now, everywhere (open-loop turnover)
    # (concurrency, passed the SLO) of every final stage that measured requests; read by the search
    slo_outcomes: Callable[[], list[tuple[int, bool]]] = lambda: []
    # stage k's SLO counts so far, merged everywhere (None: not known); read by the early stop
    slo_live: Callable[[int], LiveCounts | None] = lambda k: None


@dataclass(frozen=True)
class PhaseStarted:
    stage: int  # -1 only for a drain before any stage ran (the guard refused the first)
    phase: Phase
    concurrency: float  # the stage's load (after a guard clamp): users, or requests/s (open loop)
    search: bool = False  # an SLO search stage (decided from the outcomes of final stages)


@dataclass(frozen=True)
class GuardDecided:
    stage: int  # the index the stage would have
    concurrency: float  # the load as planned (users, or requests/s)
    decision: GuardDecision


@dataclass(frozen=True)
class WindowOpened:
    stage: int
    t: float
    # the warmup reached max_warmup_s before the turnover it waits for: the window opens before the
    # steady state (the stage is marked ``warmup_capped``)
    capped: bool = False


@dataclass(frozen=True)
class WindowClosed:
    stage: int
    t: float
    users: int  # users running at the close
    early: EarlyVerdict | None = None  # closed before duration_s: the verdict decided (slo.early_stop)


@dataclass(frozen=True)
class StageFinal:
    """No request of the stage is still running (or the drain timed out: ``forced``)."""

    stage: int
    forced: bool = False


@dataclass(frozen=True)
class SweepDone:
    reason: str  # completed | guard_abort | the reason given to stop()


Event = PhaseStarted | GuardDecided | WindowOpened | WindowClosed | StageFinal | SweepDone


@dataclass
class Tick:
    users: int | None
    spawn_rate: float
    events: list[Event]


class SweepPlan:
    """Drives a concurrency sweep; see the module docstring for the rules."""

    def __init__(self, concurrencies: list[int], *, ramp_s: float, warmup_s: float, duration_s: float,
                 min_requests: int, max_window_s: float, drain_s: float, decide: Callable,
                 turnover: bool = False, max_warmup_s: float = float("inf"),
                 users_for: Callable[[float], int] | None = None, slo: Objectives | None = None):
        self.concurrencies = list(concurrencies)  # each stage's load (open loop: requests/s)
        self.users_for = users_for  # open loop: dispatcher users for a rate; None: users = load
        self.ramp_s, self.warmup_s, self.duration_s = ramp_s, warmup_s, duration_s
        self.min_requests, self.max_window_s, self.drain_s = min_requests, max_window_s, drain_s
        self.decide = decide
        self.turnover, self.max_warmup_s = turnover, max_warmup_s
        self.finished_mark = 0  # run-wide finished count when this stage's ramp / window began
        self.index = -1  # stage index (position in the sweep); -1 before the first
        self.kind: Phase | None = None
        self.since = 0.0  # when the current phase began
        self.target = 0  # this stage's load: users wanted, or requests/s (open loop)
        self.last_stage = False
        self.finished_total = 0
        self.pending: list[int] = []  # closed, not yet final
        self.stop_reason: str | None = None  # stop(reason) during CLOSING
        self.exit_reason: str = "completed"
        self.isolate = slo is not None and slo.enabled  # each stage starts once the one before is final
        # None: no search; in open loop the search bisects the offered rate
        self.slo = slo if self.isolate and slo.search else None
        self.early_stop = EarlyStop(slo) if self.isolate and slo.early_stop else None
        self.sweep_over = False  # the geometric stages are done (or the guard refused the next)
        self.search_stages = 0  # search stages started
        self.search = False  # the current stage is a search stage
        self.ramp_from = 0  # users before this stage's ramp (a search stage may lower them)

    def stop(self, reason: str) -> None:
        """The adapter's answer to a ``WindowClosed``: end the sweep after this stage."""
        self.stop_reason = reason

    # -- helpers ---------------------------------------------------------------------------------
    def _enter(self, kind: Phase, now: float, events: list[Event]) -> None:
        self.kind, self.since = kind, now
        events.append(PhaseStarted(self.index, kind, self.target, self.search))

    def _next_stage(self, obs: Observation, events: list[Event]) -> None:
        """Start the next sweep stage, else the next search stage, else the drain; or, while the
        search waits for stages to become final, nothing (the plan stays where it is)."""
        now, nxt = obs.now, self.index + 1
        if self.isolate and self.pending and now - self.since + CLOCK_SLACK_S < self.drain_s:
            return  # pass/fail is known once a stage is final; its users keep running meanwhile
        if not self.sweep_over and not self.last_stage and nxt < len(self.concurrencies):
            if self._start(nxt, self.concurrencies[nxt], now, events, search=False):
                return
            self.exit_reason = "guard_abort"
        self.sweep_over = True
        if self.slo is None or self.index < 0:
            self._enter(Phase.DRAIN, now, events)
            return
        wanted = next_search_concurrency(obs.slo_outcomes(), self.slo, self.search_stages,
                                         rate=self.users_for is not None)
        if wanted is None or not self._start(nxt, wanted, now, events, search=True):
            if wanted is not None:
                self.exit_reason = "guard_abort"
            self._enter(Phase.DRAIN, now, events)

    def _start(self, nxt: int, wanted: float, now: float, events: list[Event], search: bool) -> bool:
        """Ask the guard about stage ``nxt`` at load ``wanted`` (users, or requests/s); ramp it if
        allowed."""
        decision = self.decide(wanted)
        events.append(GuardDecided(nxt, wanted, decision))
        if not decision.allowed:
            return False
        self.index, self.search = nxt, search
        self.search_stages += search
        self.finished_mark = self.finished_total
        self.ramp_from, self.target = self.target, decision.run_concurrency or wanted
        if self.target != wanted and not search:  # clamped: the last sweep stage
            self.last_stage = True
        self._enter(Phase.RAMP, now, events)
        return True

    def _finalize_ready(self, obs: Observation, events: list[Event], force: bool = False) -> None:
        for k in list(self.pending):
            if force or obs.stage_done(k):
                self.pending.remove(k)
                events.append(StageFinal(k, forced=force and not obs.stage_done(k)))

    def _users(self) -> int:
        return self.target if self.users_for is None else self.users_for(self.target)

    def _turned_over(self, obs: Observation) -> bool:
        """C requests (open loop: as many as are in flight, at least 1) finished since the mark
        (the ramp's or the window's start), if asked."""
        need = self.target if self.users_for is None else max(1, obs.inflight)
        return not self.turnover or self.finished_total - self.finished_mark >= need

    def _early(self, obs: Observation) -> EarlyVerdict | None:
        """The stage's verdict, if decided early (``slo.early_stop``) from its live counts."""
        if self.early_stop is None or (live := obs.slo_live(self.index)) is None:
            return None
        return self.early_stop.decide(live)

    # -- the decision ------------------------------------------------------------------------------
    def tick(self, obs: Observation) -> Tick:
        events: list[Event] = []
        now = obs.now
        self.finished_total = obs.finished_total
        if self.kind is None:
            self._next_stage(obs, events)
        elapsed = now - self.since + CLOCK_SLACK_S
        if self.kind is Phase.RAMP:
            users = self._users()
            arrived = obs.users <= users if self.target < self.ramp_from else obs.users >= users
            if arrived or elapsed >= self.ramp_s * 4 + 10:
                self._enter(Phase.WARMUP, now, events)
        elif self.kind is Phase.WARMUP:
            turned = self._turned_over(obs)
            if (elapsed >= self.warmup_s and turned) or elapsed >= max(self.max_warmup_s, self.warmup_s):
                self._enter(Phase.MEASURE, now, events)
                self.finished_mark = self.finished_total
                events.append(WindowOpened(self.index, now, capped=not turned))
        elif self.kind is Phase.MEASURE:
            enough = obs.finished(self.index) >= self.min_requests and self._turned_over(obs)
            early = self._early(obs) if enough and elapsed < self.duration_s else None
            # max_window_s caps an extension, never the window asked for (a soak's --stage-duration of days)
            if (elapsed >= self.duration_s and enough) or elapsed >= max(self.max_window_s, self.duration_s) or early:
                self._enter(Phase.CLOSING, now, events)
                events.append(WindowClosed(self.index, now, obs.users, early))
                self.pending.append(self.index)
        elif self.kind is Phase.CLOSING:  # the adapter has read the window (and may have said stop)
            if self.stop_reason:
                self.exit_reason = self.stop_reason
                self._enter(Phase.DRAIN, now, events)
            else:
                self._next_stage(obs, events)
        if self.kind is Phase.DRAIN:
            timed_out = now - self.since + CLOCK_SLACK_S >= self.drain_s
            self._finalize_ready(obs, events, force=timed_out)
            if not self.pending and (timed_out or obs.idle()):
                self.kind = Phase.DONE
                events.append(SweepDone(self.exit_reason))
        else:
            self._finalize_ready(obs, events)
        if self.kind is Phase.DONE:
            return Tick(None, 0.0, events)
        users = self._users()
        # ramp_s == 0 or open loop (the rate steps at once): start every user at once
        at_once = self.ramp_s <= 0 or self.users_for is not None
        spawn_rate = float(users) if at_once else max(users / self.ramp_s, 1.0)
        return Tick(users, spawn_rate, events)


def plan_of(loads, stages, slo: Objectives, decide: Callable,
            users_for: Callable[[float], int] | None = None) -> SweepPlan:
    """The plan of a scenario's stage loads, its ``stages`` section (``loadgen.config.StagesConfig``)
    and its ``slo`` objectives: built here once, for the run (``loadgen.locust_face.shape``) and the what-if
    (``loadgen.whatif.virtual_sweep``), so a rule or a parameter cannot differ between the two."""
    return SweepPlan(list(loads), users_for=users_for, ramp_s=stages.ramp_s, warmup_s=stages.warmup_s,
                     duration_s=stages.duration_s, min_requests=stages.min_requests,
                     max_window_s=stages.max_window_s, drain_s=stages.drain_s, turnover=stages.turnover,
                     max_warmup_s=stages.max_warmup_s, decide=decide, slo=slo)
