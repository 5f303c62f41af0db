"""results: the guard's record and a stage row's flags, from typed stage facts (pure)."""

from __future__ import annotations

import pytest

from loadgen.guard import decide
from loadgen.results import GuardRecord, StageInfo, stage_row, stage_warnings

CLIENT = {"cpu_percent": 12.0, "loop_lag_p99_s": 0.001}


def test_guard_record_of_abort_clamp_and_warn():
    abort, clamp, warn = GuardRecord(), GuardRecord(), GuardRecord()
    for g, action in ((abort, "abort"), (clamp, "clamp"), (warn, "warn")):
        g.record(decide(2, 10_000, 1000, 1000, 0.0, action))  # fits
        g.record(decide(8, 10_000, 1000, 1000, 0.0, action))  # 16,000 > 10,000
    assert (abort.stopped_before, abort.clamped_to, abort.breaches, abort.warned) == (8, None, 1, [])
    assert (clamp.stopped_before, clamp.clamped_to, clamp.breaches) == (8, 5, 1)
    assert (warn.stopped_before, warn.warned, warn.last.concurrency) == (None, [8], 8)


def test_stage_row_flags_and_fields():
    guard = GuardRecord()
    guard.record(decide(8, 10_000, 1000, 1000, 0.0, "clamp"))  # clamped to 5
    info = StageInfo(3, 5, open_t=10.0, window_s=20.0, users=4, server={"over_capacity": True})
    info.add_lost(2)
    info.add_lost(1)
    row = stage_row(info, None, guard, CLIENT, client_bound=True, unfinished=7, cut_by="interrupted")
    assert (row["index"], row["concurrency"], row["users"], row["window_s"]) == (3, 5, 4, 20.0)
    assert (row["lost_requests"], row["unfinished_requests"], row["requests"]) == (3, 7, 0)
    assert row["flags"] == ["worker_lost", "guard_clamped", "server_over_capacity", "client_bound",
                            "interrupted", "users_short"]
    assert row["server"] == {"over_capacity": True} and row["client"] == CLIENT
    over, bound = stage_warnings(row, 64, 32)
    assert over.startswith("llm-loadgen: stage 3 C=5: the server was over capacity (")
    assert "stage 3 was CLIENT-BOUND (CPU 12%, loop lag p99 " in bound  # rounded to what it means


def test_a_plain_stage_has_no_flags():
    row = stage_row(StageInfo(0, 1, window_s=5.0, users=1), None, GuardRecord(), CLIENT, client_bound=False)
    assert row["flags"] == [] and "unfinished_requests" not in row and "lost_requests" not in row
    assert stage_warnings(row, 64, 32) == []


def test_open_loop_row_and_a_lost_share_lowers_the_offered_rate():
    from loadgen.stats import Collector

    info = StageInfo(0, 8.0, open_t=100.0, window_s=20.0, users=4, rate_per_s=8.0, parts=4)
    info.lose_part(110.0)  # one of 4 shares (2/s) missing for the last half of the window
    info.lose_part(90.0)  # lost before the window opened: missing for all of it
    c = Collector()
    c.request_scheduled(0, 0.001)
    c.add_inflight(0, 40_000_000, 3)
    row = stage_row(info, c.stages[0], GuardRecord(), {"cpu_percent": 1.0}, False)
    assert row["offered_rate_per_s"] == pytest.approx(8.0 * (1 - (10 + 20) / 20 / 4))  # 5.0
    assert row["planned_rate_per_s"] == 8.0 and "worker_lost" in row["flags"]
    assert row["concurrency"] is None and row["concurrency_mean"] == 2.0 and row["concurrency_max"] == 3
    assert row["scheduled_rate_per_s"] == 1 / 20 and "users_short" not in row["flags"]
