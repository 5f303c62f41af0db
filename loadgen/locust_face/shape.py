"""``SweepShape``: the Locust LoadTestShape that runs the sweep (``shapes/sweep.py`` is its face).

It runs on the master (or the local runner) only. Every tick (``TICK_S``, 0.2 s: ``shape_loop``
replaces Locust's once-a-second loop, so a stage's ramp or the end of a run does not wait a
whole second for the next look) it observes users, finished and
in-flight requests (and, for ``slo.early_stop``, the measuring stage's SLO counts merged so far),
asks the pure ``SweepPlan`` what to do, hands the plan's events to the ``Session`` (phases, guard
decisions, windows, final rows) and re-broadcasts the phase to workers.
When a window closes the session reads the server watch once and may answer "stop"
(``plan.stop``); the plan is then ticked again at once, so the next stage starts in the same tick.
"""

from __future__ import annotations

import logging
import time

import gevent
from locust import LoadTestShape
from locust.runners import STATE_INIT, STATE_RUNNING, STATE_SPAWNING

from loadgen.errors import EXIT_INTERNAL
from loadgen.phases import Phase
from loadgen.run.plan import TICK_S, Observation, SweepPlan, Tick, plan_of
from loadgen.run.results import slo_outcomes
from loadgen.slo.early import live_counts
from loadgen.stats.stage_load import CONCURRENCY, RATE

log = logging.getLogger("llm_loadgen")


class SweepShape(LoadTestShape):
    """Geometric (or listed) concurrency stages with warmup, measurement window and KV guard."""

    plan: SweepPlan | None = None
    # The users of each mode, by class name (locustfile.py imports both): a closed-loop user per
    # stream, or one open-loop dispatcher per load-generating process (loadgen.locust_face.open_loop).
    CLOSED_LOOP_USER, OPEN_LOOP_USER = "LLMUser", "RateUser"

    def _build_plan(self, rt) -> SweepPlan:
        sc, guard = rt.scenario, self.session.stage_guard
        return plan_of(sc.loads(), sc.stages, sc.slo, guard.decide,
                       users_for=guard.load_processes if sc.open_loop else None)

    def _step(self, rt, now: float) -> Tick:
        """One plan tick; its events go to the session, whose answer to a closed window (a reason
        to stop) goes back to the plan."""
        session, fleet = self.session, self.session.fleet
        tick = self.plan.tick(Observation(
            now=now,
            users=self.runner.user_count,
            finished=rt.finished,
            finished_total=rt.finished_total(),
            stage_done=session.stage_done,
            idle=fleet.all_idle,
            inflight=fleet.inflight_total(),
            slo_outcomes=lambda: slo_outcomes(session.rows, RATE if rt.scenario.open_loop else CONCURRENCY),
            slo_live=lambda k: live_counts(rt.collector.stages.get(k), fleet.inflight(k), rt.scenario.slo),
        ))
        for ev in tick.events:
            if reason := session.on_event(ev, now):
                self.plan.stop(reason)
        return tick

    def tick(self):
        rt = self.runner.environment.llm
        session = self.session = self.runner.environment.llm_run
        fleet = session.fleet
        if session.finished_run or session.exit_code is not None and session.stop_reason == "error":
            if session.finished_run and not getattr(self, "_said_once", False):
                self._said_once = True  # the web UI's "New" button on a process that already ran
                log.warning("llm-loadgen: this process already ran its sweep (results in %s); start "
                            "locust again for another run", session.run_dir)
            return None
        try:
            session.flush_locust_events()  # the start check's probes, once Locust has started
            if not session.started and not session.start():
                return None
            if self.plan is None:
                self.plan = self._build_plan(rt)
            session.say_new_failures()
            now = self.get_run_time()
            session.check_workers(now)
            tick = self._step(rt, now)
            if self.plan.kind is Phase.CLOSING:  # the window was read: go on (or stop) now, not a tick later
                tick = self._step(rt, now)
            fleet.broadcast_phase()
            session.progress(now)
            session.close_slices()
        except Exception as exc:  # a bug of ours must not lose the stages already measured
            log.exception("sweep failed")
            session.fatal(EXIT_INTERNAL, f"internal error in the sweep: {exc!r}")
            return None
        if tick.users is None:
            return None
        name = self.OPEN_LOOP_USER if rt.scenario.open_loop else self.CLOSED_LOOP_USER
        user = self.runner.environment.user_classes_by_name.get(name)
        if user is None:  # a locustfile of its own users (bench/): Locust's choice by weight
            return tick.users, tick.spawn_rate
        return tick.users, tick.spawn_rate, [user]


def shape_loop(runner, tick_s: float = TICK_S) -> None:
    """Locust's shape loop (``Runner.shape_worker``, 2.47), ticking every ``tick_s`` instead of every
    second: ask the shape, stop the run on None (quit when headless, as Locust does), start the
    users on a change. ``loadgen.locust_face.plugin`` installs it on the runner of a sweep."""
    shape = runner.environment.shape_class
    while runner.state in (STATE_INIT, STATE_SPAWNING, STATE_RUNNING):
        began = time.monotonic()
        wanted = shape.tick()
        if wanted is None:
            options = runner.environment.parsed_options
            if options is not None and options.headless:
                runner.quit()
            else:
                runner.stop()
            runner.shape_greenlet, runner.shape_last_tick = None, None
            return
        if wanted != runner.shape_last_tick:
            users, spawn_rate, *classes = wanted
            runner.start(user_count=users, spawn_rate=spawn_rate, user_classes=classes[0] if classes else None)
            runner.shape_last_tick = wanted
        gevent.sleep(max(tick_s - (time.monotonic() - began), 0.0))
