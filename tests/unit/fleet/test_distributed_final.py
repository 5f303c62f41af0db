"""The master's side of a worker's life: heartbeats, reports, the phase echo, a loss, and the stop's
final reports (loadgen/fleet/distributed.py Fleet, loadgen/fleet/final_reports.py). No sockets: a fake runner
and a fake clock that a fake sleep advances."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from loadgen.fleet.distributed import PHASE_MESSAGE, PHASE_RESEND_S, Fleet
from loadgen.fleet.final_reports import FINAL_MESSAGE, FINAL_REPORT_MESSAGE, FINAL_REPORT_WAIT_S
from loadgen.phases import Phase
from loadgen.stats.stage_stats import Collector


class Clock:
    def __init__(self):
        self.t = 100.0
        self.at: dict[float, callable] = {}  # things that happen once the clock passes a time

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s
        for when in sorted(self.at):
            if when <= self.t:
                self.at.pop(when)()


class Runner:
    """What Fleet and FinalReports use of Locust's MasterRunner."""

    def __init__(self, *ids: str):
        self.clients = {i: SimpleNamespace(id=i, state="running", user_count=0) for i in ids}
        self.sent: list[tuple[str, object, str | None]] = []
        self.stops: list[bool] = []
        self.quits = 0
        self.messages: dict = {}
        self.environment = SimpleNamespace(stop_timeout=0.0, events=None)

    def send_message(self, name, data=None, client_id=None):
        self.sent.append((name, data, client_id))

    def stop(self, send_stop_to_client=True):
        self.stops.append(send_stop_to_client)

    def quit(self):
        self.quits += 1

    def register_message(self, name, handler):
        self.messages[name] = handler


def master_fleet(*ids: str, open_loop: bool = False):
    clock, runner = Clock(), Runner(*ids)
    env = SimpleNamespace(runner=runner)
    rt = SimpleNamespace(is_master=True, is_worker=False, environment=env, collector=Collector(), stage=None,
                         kind=Phase.IDLE, phase_seq=0, rate_per_s=None, compat=None,
                         scenario=SimpleNamespace(open_loop=open_loop))
    fleet = Fleet(rt, clock=clock)
    fleet.finals.sleep = clock.sleep
    return fleet, rt, runner, clock


def hook_master(runner, fleet) -> None:
    """What loadgen.locust_face.plugin registers on a master for the final reports."""
    runner.register_message(FINAL_REPORT_MESSAGE, fleet.finals.on_final_report)
    runner.quit = fleet.finals.quit_after(runner.quit)


def phase(fleet, rt, stage, kind) -> None:
    rt.stage, rt.kind, rt.phase_seq = stage, Phase(kind), rt.phase_seq + 1
    fleet.broadcast_phase()


def report(inflight: dict, echo=None) -> dict:
    return {"delta": Collector().take_delta(), "health": {}, "inflight": inflight, "phase_seq": 0,
            "health_now": [None, None], "echo": echo}


def test_a_worker_killed_mid_window_is_booked_from_its_heartbeats_not_its_stale_report():
    fleet, rt, runner, clock = master_fleet("w0", "w1")
    phase(fleet, rt, 0, "ramp")
    fleet.merge_report("w1", report({}), users=0)  # its only report: before any request
    clock.t += 1
    phase(fleet, rt, 0, "warmup")
    clock.t += 1
    phase(fleet, rt, 0, "measure")
    runner.clients["w1"].user_count = 2
    for _ in range(3):
        clock.t += 1
        fleet.heard("w1", runner.clients["w1"].user_count)
        fleet.heard("w0", 2)
    heard_at = clock.t
    clock.t += 3.5  # killed; Locust marks it missing ~3-4 s later, in the next stage
    phase(fleet, rt, 0, "closing")
    phase(fleet, rt, 1, "ramp")
    runner.clients["w1"].state = "missing"
    (lost,) = fleet.drop_lost()
    assert lost.client_id == "w1" and lost.running == {0: 2} and (lost.stage, lost.phase) == (0, "measure")
    assert lost.heard_t == heard_at and lost.inflight_lost_is == "at_most"
    assert fleet.drop_lost() == [], "booked once"
    assert "w1" not in fleet.inflight_by_worker


def test_the_round_trip_comes_from_the_phase_echo_on_the_masters_clock_alone():
    fleet, rt, runner, clock = master_fleet("w0")
    phase(fleet, rt, 0, "ramp")
    (_, msg, _), = [m for m in runner.sent if m[0] == "llm_phase"]
    assert msg["sent_t"] == 100.0
    clock.t += 2.0  # 0.3 s each way, and the worker held it 1.4 s before its report
    fleet.merge_report("w0", report({}, echo=[msg["sent_t"], 1.4]))
    assert fleet.finals.rtt_s["w0"] == pytest.approx(0.6)


def test_the_stop_waits_for_every_live_workers_final_report_then_none_is_lost():
    fleet, rt, runner, clock = master_fleet("w0", "w1")
    fleet.heard("w0", 4)
    fleet.heard("w1", 4)
    clock.at[clock.t + 0.6] = lambda: fleet.finals.received.add("w0")
    clock.at[clock.t + 1.3] = lambda: fleet.finals.received.add("w1")
    fleet.finals.stop()
    assert runner.stops == [False], "the shape and spawning stop first, the workers are not told"
    assert sorted(c for name, _, c in runner.sent if name == FINAL_MESSAGE) == ["w0", "w1"]
    assert fleet.finals.waited_s == pytest.approx(1.3, abs=0.06) and fleet.finals.missing == set()
    runner.clients.clear()  # they quit
    assert fleet.drop_lost() == []


def test_a_final_report_that_never_comes_ends_the_wait_at_the_deadline_with_a_warning(caplog):
    fleet, rt, runner, clock = master_fleet("w0", "w1")
    runner.environment.stop_timeout = 2.0
    fleet.finals.rtt_s.update(w0=0.1, w1=0.7)
    phase(fleet, rt, 0, "measure")
    fleet.merge_report("w1", report({0: 3}), users=3)
    fleet.heard("w0", 3)
    clock.at[clock.t + 0.2] = lambda: fleet.finals.received.add("w0")
    with caplog.at_level(logging.WARNING, logger="llm_loadgen"):
        fleet.finals.stop()
    assert fleet.finals.waited_s == pytest.approx(FINAL_REPORT_WAIT_S + 2.0 + 0.7, abs=0.06)
    assert fleet.finals.missing == {"w1"}
    assert "from 1 of 2 workers: w1" in caplog.text
    (lost,) = fleet.drop_lost()  # still connected, but what it did since its last report is missing
    assert (lost.client_id, lost.reason, lost.running) == ("w1", "no_final_report", {0: 3})


def test_a_worker_going_missing_during_the_wait_ends_it_early():
    fleet, rt, runner, clock = master_fleet("w0")
    fleet.heard("w0", 1)
    clock.at[clock.t + 1.0] = lambda: setattr(runner.clients["w0"], "state", "missing")
    fleet.finals.stop()
    assert fleet.finals.waited_s == pytest.approx(1.0, abs=0.06) and fleet.finals.missing == {"w0"}


def test_quit_runs_the_collection_once_and_a_quit_during_it_returns_at_once():
    fleet, rt, runner, clock = master_fleet("w0")
    hook_master(runner, fleet)
    nested = []
    clock.at[clock.t + 0.5] = lambda: nested.append(runner.quit())  # Locust's listener: last worker left
    clock.at[clock.t + 0.7] = lambda: fleet.finals.received.add("w0")
    runner.quit()
    assert runner.quits == 1 and nested == [None] and fleet.finals.done
    runner.quit()  # Locust quits again at shutdown: no second collection
    assert runner.quits == 2 and len([m for m in runner.sent if m[0] == FINAL_MESSAGE]) == 1


def test_the_final_report_merges_as_a_worker_report_and_marks_the_worker_done():
    fleet, rt, runner, clock = master_fleet("w0")
    fired = []
    env = SimpleNamespace(events=SimpleNamespace(worker_report=SimpleNamespace(
        fire=lambda **kw: fired.append(kw))))
    hook_master(runner, fleet)
    runner.messages[FINAL_REPORT_MESSAGE](env, SimpleNamespace(node_id="w0", data={"llm": {}}))
    assert fired == [{"client_id": "w0", "data": {"llm": {}}}] and fleet.finals.received == {"w0"}


def test_a_worker_lost_in_a_rate_stage_is_recorded_with_the_stages_offered_rate_not_as_a_concurrency():
    from loadgen.run.results import StageInfo
    from loadgen.run.session import Session

    fleet, rt, runner, clock = master_fleet("w0", "w1", open_loop=True)
    session = Session(rt, fleet)
    phase(fleet, rt, 0, "ramp")
    fleet.assign_parts()
    session.stage_info[0] = StageInfo(0, 8.0, open_t=clock.t, rate_per_s=8.0, parts=len(fleet.parts))
    phase(fleet, rt, 0, "measure")
    fleet.heard("w0", 1)
    fleet.heard("w1", 1)
    clock.t += 2
    runner.clients["w1"].state = "missing"
    session.check_workers(now=clock.t)
    (loss,) = session.worker_losses
    assert loss["worker"] == "w1" and loss["stage"] == 0
    assert loss["concurrency"] is None and loss["offered_rate_per_s"] == 8.0, loss  # the window is still open
    assert session.stage_info[0].parts_lost_t == [clock.t] and "worker_lost" in session.stage_info[0].flags


def test_a_new_phase_is_sent_at_once_and_an_unchanged_one_again_once_a_second():
    """The shape ticks 5 times a second; the workers hear a new phase at that tick, and the same
    phase again only every PHASE_RESEND_S (for a worker that joined since), not at every tick."""
    fleet, rt, runner, clock = master_fleet("w0")
    sent = lambda: [d["seq"] for name, d, _ in runner.sent if name == PHASE_MESSAGE]  # noqa: E731
    phase(fleet, rt, 0, "ramp")
    for _ in range(4):  # four more ticks within the second: nothing new to say
        clock.t += 0.2
        fleet.broadcast_phase()
    assert sent() == [1]
    phase(fleet, rt, 0, "warmup")  # a new phase: at once, whenever the last send was
    assert sent() == [1, 2]
    clock.t += PHASE_RESEND_S
    fleet.broadcast_phase()
    assert sent() == [1, 2, 2]
