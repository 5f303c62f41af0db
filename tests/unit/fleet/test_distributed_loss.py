"""What the master books for a lost worker (loadgen/fleet/worker_loss.py): pure, times on a fake clock (s)."""

from __future__ import annotations

from loadgen.fleet.worker_loss import NO_FINAL_REPORT, PhaseTimeline, WorkerEvidence, book_loss
from loadgen.phases import Phase

HB = 1.0  # heartbeat interval


def sweep(*phases: tuple[float, int | None, str]) -> PhaseTimeline:
    """A master's phase timeline from (t, stage, phase) marks."""
    tl = PhaseTimeline()
    for seq, (t, stage, kind) in enumerate(phases, start=1):
        tl.note(t, seq, stage, kind)
    return tl


# stage 0: ramp at 10, warmup 11, window 12-16; stage 1: ramp 16, warmup 17, window 18-22; drain 22
TWO_STAGES = sweep((10, 0, "ramp"), (11, 0, "warmup"), (12, 0, "measure"), (16, 0, "closing"),
                   (16, 1, "ramp"), (17, 1, "warmup"), (18, 1, "measure"), (22, 1, "closing"), (22, 1, "drain"))


def test_the_timeline_answers_the_phase_at_a_time_and_the_windows_open_in_a_span():
    tl = TWO_STAGES
    assert tl.at(5) == (None, Phase.IDLE) and tl.at(12) == (0, Phase.MEASURE) and tl.at(16.5) == (1, Phase.RAMP)
    assert tl.measured(0, 11.9) == [] and tl.measured(13, 14) == [0] and tl.measured(15, 18) == [0, 1]
    assert tl.sent(13, 14) and tl.sent(21, 30) and not tl.sent(23, 30)
    done = sweep((1, 0, "ramp"), (2, 0, "drain"))
    done.note(3, 3, 0, "done")
    done.note(4, 3, 0, "drain")  # a repeated (or older) seq, re-broadcast every tick, is no new phase
    done.note(5, 1, 0, "measure")
    assert done.at(40) == (0, Phase.DONE) and len(done.marks) == 3


def test_a_closed_loop_worker_dying_mid_window_after_a_stale_report_is_booked_to_that_window():
    """The defect this module fixes: the last report (before the window) said nothing was running;
    heartbeats said the worker had 2 users until 14.6. Both may have had a request in flight."""
    ev = WorkerEvidence(first_t=9.0, heard_t=9.0)
    ev.reported(9.5, {}, users=0)
    for t in (10.6, 11.6, 12.6, 13.6, 14.6):
        ev.heard(t, users=2)
    lost = book_loss("w1", ev, TWO_STAGES, closed_loop=True, heartbeat_s=HB)
    assert lost.running == {0: 2} and lost.requests == 2
    assert (lost.stage, lost.phase) == (0, "measure")
    assert (lost.inflight_lost_is, lost.inflight_lost_from, lost.users) == ("at_most", "users", 2)
    rec = lost.record(lambda t: None if t is None else f"t={t}")
    assert rec["inflight_lost"] == 2 and rec["last_heard_at"] == "t=14.6" and rec["last_report_at"] == "t=9.5"
    assert "lost during stage 0 (measure)" in lost.describe() and "at most 2 requests" in lost.describe()


def test_reported_requests_of_a_closed_window_only_finish_the_rest_goes_to_the_open_one():
    """Report at 15.5 (stage 0 window): 3 of stage 0 running. Heard last at 18.5 in stage 1's window
    with 4 users. Stage 0's window was open in the span too (15.5-16), so it is not 'closed' here;
    a report at 16.5 (after stage 0 closed) keeps its 3 at most and stage 1 gets the other 1."""
    ev = WorkerEvidence(first_t=1.0, heard_t=1.0)
    ev.reported(16.5, {0: 3, None: 1}, users=4)
    ev.heard(18.5, users=4)
    lost = book_loss("w1", ev, TWO_STAGES, closed_loop=True, heartbeat_s=HB)
    assert lost.running == {0: 3, None: 1, 1: 0}, lost.running  # stage 1's share: 4 - 3 - 1 = 0
    assert lost.requests == 4 and lost.stage == 1
    early = WorkerEvidence(first_t=1.0, heard_t=1.0)
    early.reported(15.5, {0: 3}, users=4)
    early.heard(18.5, users=4)
    both = book_loss("w2", early, TWO_STAGES, closed_loop=True, heartbeat_s=HB)
    assert both.running == {0: 0, 1: 4}, "stage 0's window was open after the report: no cap by its count"


def test_a_death_span_reaching_into_a_window_books_it_and_none_books_warmup_requests():
    """Heard last at 11.5 (warmup): it died before 12.5, maybe inside stage 0's window (from 12)."""
    ev = WorkerEvidence(first_t=1.0, heard_t=1.0)
    ev.reported(10.5, {}, users=0)
    ev.heard(11.5, users=2)
    assert book_loss("w", ev, TWO_STAGES, True, HB).running == {0: 2}
    ev2 = WorkerEvidence(first_t=1.0, heard_t=1.0)
    ev2.reported(10.2, {None: 1}, users=2)
    ev2.heard(10.8, users=2)  # died before 11.8: ramp and warmup only
    lost = book_loss("w", ev2, TWO_STAGES, True, HB)
    assert lost.running == {None: 2} and lost.requests == 2 and (lost.stage, lost.phase) == (0, "ramp")
    assert "stages none" in lost.describe()


def test_in_the_drain_nothing_new_was_sent_so_the_last_report_bounds_what_was_running():
    ev = WorkerEvidence(first_t=1.0, heard_t=1.0)
    ev.reported(22.5, {1: 2}, users=8)
    ev.heard(24.0, users=8)
    lost = book_loss("w", ev, TWO_STAGES, True, HB)
    assert lost.running == {1: 2} and (lost.inflight_lost_is, lost.inflight_lost_from) == ("at_most", "last_report")
    assert (lost.stage, lost.phase) == (1, "drain")


def test_open_loop_or_unknown_users_book_the_last_reports_count_as_of_that_report():
    ev = WorkerEvidence(first_t=1.0, heard_t=1.0)
    ev.reported(13.0, {0: 7}, users=1)  # one dispatcher user with 7 requests in flight
    ev.heard(14.0, users=1)
    lost = book_loss("w", ev, TWO_STAGES, closed_loop=False, heartbeat_s=HB)
    assert lost.running == {0: 7} and (lost.inflight_lost_is, lost.inflight_lost_from) == ("as_of_last_report",
                                                                                              "last_report")
    assert "7 requests in flight (its last report's count)" in lost.describe()
    unknown = WorkerEvidence(first_t=1.0, heard_t=1.0)
    unknown.reported(13.0, {0: 2}, users=None)
    assert book_loss("w", unknown, TWO_STAGES, True, HB).running == {0: 2}


def test_a_worker_that_never_reported_is_booked_from_when_it_was_first_heard():
    ev = WorkerEvidence(first_t=12.5, heard_t=12.5)
    ev.heard(13.5, users=3)
    lost = book_loss("w", ev, TWO_STAGES, True, HB)
    assert lost.running == {0: 3} and lost.report_t is None and lost.record(str)["last_report_at"] == "None"


def test_a_worker_without_its_final_report_is_booked_at_the_stop_with_a_warning_line():
    ev = WorkerEvidence(first_t=1.0, heard_t=1.0)
    ev.reported(19.0, {1: 4}, users=4)
    ev.heard(20.5, users=4)
    lost = book_loss("w9", ev, TWO_STAGES, True, HB, reason=NO_FINAL_REPORT)
    assert lost.running == {1: 4} and lost.record(str)["reason"] == "no_final_report"
    line = lost.describe()
    assert line.startswith("warning: worker w9: no final report at the stop (last heard in stage 1, measure)")
