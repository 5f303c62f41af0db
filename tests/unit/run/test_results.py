"""results: the guard's record and a stage row's flags, from typed stage facts (pure)."""

from __future__ import annotations

import pytest

from loadgen.run.kv_guard import decide
from loadgen.run.results import GuardLog, StageInfo, stage_row, stage_warnings

CLIENT = {"cpu_percent": 12.0, "loop_lag_p99_s": 0.001}


def test_guard_record_of_abort_clamp_and_warn():
    abort, clamp, warn = GuardLog(), GuardLog(), GuardLog()
    for g, action in ((abort, "abort"), (clamp, "clamp"), (warn, "warn")):
        g.record(decide(2, 10_000, 1000, 1000, 0.0, action))  # fits
        g.record(decide(8, 10_000, 1000, 1000, 0.0, action))  # 16,000 > 10,000
    assert (abort.stopped_before, abort.clamped_to, abort.breaches, abort.warned) == (8, None, 1, [])
    assert (clamp.stopped_before, clamp.clamped_to, clamp.breaches) == (8, 5, 1)
    assert (warn.stopped_before, warn.warned, warn.last.concurrency) == (None, [8], 8)


def test_stage_row_flags_and_fields():
    guard = GuardLog()
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
    capped = StageInfo(4, 8, window_s=20.0, users=8, flags=["warmup_capped"])  # the session's, on WindowOpened.capped
    assert stage_row(capped, None, guard, CLIENT, client_bound=False)["flags"] == ["warmup_capped"]
    over, bound = stage_warnings(row, 64, 32)
    assert over.startswith("llm-loadgen: stage 3 C=5: the server was over capacity (")
    assert "stage 3 was CLIENT-BOUND (CPU 12%, loop lag p99 " in bound  # rounded to what it means


def test_a_rate_stage_over_capacity_is_named_by_its_rate():
    info = StageInfo(2, 8.0, open_t=0.0, window_s=10.0, users=1, server={"over_capacity": True,
                     "over_capacity_evidence": ["preemptions +3"]}, rate_per_s=8.0)
    assert info.label == "8 req/s" and StageInfo(0, 4).label == "C=4"
    row = stage_row(info, None, GuardLog(), CLIENT, client_bound=False)
    assert row["concurrency"] is None and row["offered_rate_per_s"] == 8.0
    over = stage_warnings(row, 64, 32)[0]
    assert over.startswith("llm-loadgen: stage 2 8 req/s: the server was over capacity (preemptions +3)")


def test_a_plain_stage_has_no_flags():
    row = stage_row(StageInfo(0, 1, window_s=5.0, users=1), None, GuardLog(), CLIENT, client_bound=False)
    assert row["flags"] == [] and "unfinished_requests" not in row and "lost_requests" not in row
    assert stage_warnings(row, 64, 32) == []


def test_stage_row_with_objectives_has_the_slo_object_and_flags_search_stages():
    import numpy as np

    from loadgen.errors import OVERLOAD_503
    from loadgen.slo.objectives import Objectives
    from loadgen.stats.records import RequestResult
    from loadgen.stats.stage_stats import Collector

    obj = Objectives(ttft_s=0.5, attainment=0.9)
    empty = np.empty(0)

    def result(ok, ttft):
        return RequestResult(ok, None if ok else OVERLOAD_503, "", 10, 20, False, ttft, 1.0, 0.05, 20.0,
                             empty, empty.astype(int), empty, "length" if ok else None, 20)

    c = Collector()
    for ttft in [0.1] * 8 + [0.9]:
        c.record_result(result(True, ttft), 0, 10, 20, obj)
    c.record_result(result(False, None), 0, 10, 20, obj)  # failed after 20 tokens
    c.add_window_tokens(0, 400)  # 100 tok/s; 160 of the 200 measured tokens conform
    info = StageInfo(0, 8, window_s=4.0, users=8, search=True)
    row = stage_row(info, c.stages[0], GuardLog(), CLIENT, client_bound=False, objectives=obj)
    assert row["search"] is True and row["flags"] == ["slo_search", "slo_fail"]  # 8/10 < 0.9
    assert row["slo"] == {"attainment": 0.8, "attainment_by": {"ttft_s": 0.8}, "goodput_requests_per_s": 4.0,
                          "goodput_output_tokens_per_s": 80.0, "met_requests": 8, "pass": False}
    assert row["slo_attainment"] == 0.8 and row["goodput_output_tokens_per_s"] == 80.0
    plain = stage_row(StageInfo(1, 8, window_s=4.0, users=8), c.stages[0], GuardLog(), CLIENT, False)
    assert "slo" not in plain and plain["search"] is False and plain["flags"] == []


def test_summary_slo_answer_and_kv_ceiling():
    from loadgen.config import build_scenario
    from loadgen.run.results import kv_ceiling, summary_slo
    from loadgen.server.replies import Capacity

    def row(c, passed, search=False, attainment=1.0):
        return {"concurrency": c, "search": search, "slo": {"pass": passed, "attainment": attainment}}

    sc = build_scenario({"slo": {"tpot_s": 0.045, "search": True}})
    rows = [row(16, True), row(32, True), row(64, False), row(48, False, True), row(40, True, True),
            row(128, False, attainment=None)]  # a stage that measured nothing says nothing
    answer = summary_slo(rows, sc.slo)
    assert answer["max_concurrency"] == 40 and answer["bracket"] == [40, 48]
    assert answer["search"]["stages"] == [48, 40] and answer["search"]["converged"] is False
    assert summary_slo(rows, build_scenario({}).slo) is None
    assert kv_ceiling(Capacity(1_570_000, "scenario", None, None, ""), build_scenario({})) == 785
    assert kv_ceiling(None, sc) is None and kv_ceiling(Capacity(None, None, None, None, ""), sc) is None


def test_open_loop_row_and_a_lost_share_lowers_the_offered_rate():
    from loadgen.stats.stage_stats import Collector

    info = StageInfo(0, 8.0, open_t=100.0, window_s=20.0, users=4, rate_per_s=8.0, parts=4)
    info.lose_part(110.0)  # one of 4 shares (2/s) missing for the last half of the window
    info.lose_part(90.0)  # lost before the window opened: missing for all of it
    c = Collector()
    c.request_scheduled(0, 0.001)
    c.add_inflight(0, 40_000_000, 3)
    row = stage_row(info, c.stages[0], GuardLog(), {"cpu_percent": 1.0}, False)
    assert row["offered_rate_per_s"] == pytest.approx(8.0 * (1 - (10 + 20) / 20 / 4))  # 5.0
    assert row["planned_rate_per_s"] == 8.0 and "worker_lost" in row["flags"]
    assert row["concurrency"] is None and row["concurrency_mean"] == 2.0 and row["concurrency_max"] == 3
    assert row["scheduled_rate_per_s"] == 1 / 20 and "users_short" not in row["flags"]


def test_open_loop_slo_answer_is_in_offered_requests_per_s():
    from loadgen.config import build_scenario
    from loadgen.report.slo_line import slo_line
    from loadgen.run.results import summary_slo

    sc = build_scenario({"slo": {"ttft_s": 2}, "rate": {"list": [1, 2, 4]}})
    rows = [{"concurrency": None, "offered_rate_per_s": r, "slo": {"pass": r < 4, "attainment": 1.0}}
            for r in (1.0, 2.0, 4.0)]
    answer = summary_slo(rows, sc.slo, "offered_rate_per_s")
    assert answer["load"] == "rate_per_s" and answer["bracket"] == [2.0, 4.0]
    assert slo_line(answer) == ("SLO: max rate 2 req/s (99% of requests met ttft_s <= 2; "
                                   "4 req/s did not)")


def test_textless_requests_are_counted_ok_and_warned_under_their_stage():
    import orjson

    from loadgen.stats.records import RequestRecord
    from loadgen.stats.stage_stats import StageStats

    stats = StageStats()
    for i in range(3):  # llama.cpp's shape when every token is an unfinished UTF-8 character
        rec = RequestRecord(0.0, 16, "/v1/completions")
        rec.on_payload(orjson.dumps({"choices": [{"text": "", "finish_reason": "length"}],
                                     "usage": {"prompt_tokens": 32, "completion_tokens": 16}}), 0.1 * (i + 1))
        stats.add_result(rec.finish(0.5, eof=True), 32, 16)
    assert (stats.requests_ok, stats.textless_requests, stats.output_tokens) == (3, 3, 48)
    assert stats.ttft_s.count == stats.e2e_s.count == 3 and stats.tpot_s.count == 0
    row = stage_row(StageInfo(0, 1, window_s=5.0, users=1), stats, GuardLog(), CLIENT, client_bound=False)
    assert row["textless_requests"] == 3 and row["error_count"] == 0
    (warning,) = stage_warnings(row, 32, 16)
    assert warning.startswith("llm-loadgen: warning: stage 0: 3 of 3 requests had tokens (server usage) but no text")
