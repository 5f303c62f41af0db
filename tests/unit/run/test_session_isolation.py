"""A distributed stage is final once every worker reported from the phase that closed its window
(pure Session + master Fleet driving, no sockets; the worker reports are built by hand).

With SLO objectives the plan starts stage k+1 only once stage k is final, so no later phase comes
to wait for: a master that waited for one (the seq after CLOSING) held every stage for the whole
``drain_s`` (300 s by default), then finalized it anyway once the next ramp was sent.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from locust.env import Environment

from loadgen.config import load_scenario
from loadgen.fleet.distributed import Fleet
from loadgen.phases import Phase
from loadgen.run.plan import PhaseStarted, WindowClosed, WindowOpened
from loadgen.run.runtime import Runtime
from loadgen.run.session import Session
from loadgen.stats.stage_stats import Collector
from tests.support.users import Idle

ROOT = Path(__file__).resolve().parents[3]



class MasterFleet(Fleet):
    """The master's tables with one connected worker, ``w1`` (no runner, no messages sent)."""

    master = True

    def live_workers(self) -> list[str]:
        return ["w1"]


def report(phase_seq: int, inflight: dict) -> dict:
    """A worker report (loadgen.fleet.distributed wire) carrying nothing but its phase and in-flight counts."""
    return {"delta": Collector().take_delta(), "health": {}, "inflight": inflight, "phase_seq": phase_seq,
            "health_now": [None, None], "echo": None}


def master_session(tmp_path) -> tuple[Runtime, MasterFleet, Session]:
    """A master's Runtime, Fleet (one worker, ``w1``) and Session on the smoke scenario."""
    env = Environment(user_classes=[Idle], host="http://127.0.0.1:9", parsed_options=SimpleNamespace(headless=True))
    env.runner = SimpleNamespace(clients={})  # no worker connected to send the phase to
    rt = env.llm = Runtime(env, load_scenario(ROOT / "config" / "smoke.yaml", {"results_dir": str(tmp_path)}))
    fleet = MasterFleet(rt)
    return rt, fleet, Session(rt, fleet)


def test_a_stage_is_final_once_every_worker_reported_from_its_closing_phase(tmp_path):
    rt, fleet, s = master_session(tmp_path)
    s.on_event(PhaseStarted(0, Phase.RAMP, 2), 0.0)
    s.on_event(PhaseStarted(0, Phase.MEASURE, 2), 1.0)
    s.on_event(WindowOpened(0, 1.0), 1.0)
    measure_seq = rt.phase_seq
    s.on_event(PhaseStarted(0, Phase.CLOSING, 2), 5.0)
    s.on_event(WindowClosed(0, 5.0, 2), 5.0)
    closing_seq = rt.phase_seq
    # the plan stays in CLOSING (isolated stages): no phase after it is sent until stage 0 is final
    fleet.merge_report("w1", report(measure_seq, {}))
    assert not fleet.stage_done(0, s.close_seq[0]), "a report from inside the window cannot end the stage"
    fleet.merge_report("w1", report(closing_seq, {0: 1}))
    assert not fleet.stage_done(0, s.close_seq[0]), "one of its requests still runs"
    fleet.merge_report("w1", report(closing_seq, {0: 0, None: 2}))
    assert fleet.stage_done(0, s.close_seq[0]), "the worker knew the window closed and runs none of it"


def test_a_stage_is_not_final_before_the_session_acted_on_its_window_closing(tmp_path):
    """The plan asks whether a stage is final in the tick that closes its window, before the
    session has sent the closing phase: a worker's stale report (sent before any request of the
    stage, in flight 0) must not finalize it then."""
    rt, fleet, s = master_session(tmp_path)
    s.on_event(PhaseStarted(0, Phase.RAMP, 2), 0.0)
    s.on_event(PhaseStarted(0, Phase.MEASURE, 2), 1.0)
    s.on_event(WindowOpened(0, 1.0), 1.0)
    fleet.merge_report("w1", report(rt.phase_seq, {None: 2}))  # at the window's open: nothing of stage 0 yet
    assert not s.stage_done(0), "its window has not closed"
    s.on_event(PhaseStarted(0, Phase.CLOSING, 2), 5.0)  # the plan's tick: CLOSING, then it asks
    assert not s.stage_done(0), "the session has not sent the closing phase yet"
    s.on_event(WindowClosed(0, 5.0, 2), 5.0)
    assert not s.stage_done(0), "no report since the workers learned the window closed"
    fleet.merge_report("w1", report(s.close_seq[0], {0: 0, None: 2}))
    assert s.stage_done(0)
