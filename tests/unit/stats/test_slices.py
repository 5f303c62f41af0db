"""Time slices (docs/soak.md): the Collector's slice routing and wire form, a slice's row, the
owner's SliceBook on a fake clock, and slices.csv appended and read back."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from loadgen.errors import OVERLOAD_429
from loadgen.run.soak import SliceBook
from loadgen.run_folder.slices_csv import append_slice_rows, read_slice_rows
from loadgen.stats.slices import FEW_SAMPLES, SLICE_COLUMNS, slice_count, slice_row, slice_span
from loadgen.stats.stage_stats import Collector, StageStats
from tests.support.request_results import failed_result, ok_result


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_slice_count_and_span():
    assert slice_count(60, 10) == 6 and slice_count(62, 10) == 7 and slice_count(5, 10) == 1
    assert slice_count(61, 10) == 6 and slice_count(3.2, 3) == 1  # a tick past the end: no slice of its own
    assert slice_span(2, 10) == (20, 10)
    assert slice_span(6, 10, window_s=65) == (60, 5)  # the last slice ends with the window
    assert slice_span(5, 10, window_s=60.8) == (50, pytest.approx(10.8))


def test_a_slice_gets_what_its_stage_gets_while_it_is_open_and_nothing_else():
    rng = np.random.default_rng(1)
    c = Collector()
    c.record_result(ok_result(rng), 0, 100, None)  # no slice open: the stage only
    c.slice = (0, 0)
    c.record_result(ok_result(rng), 0, 100, None)
    c.record_result(failed_result(OVERLOAD_429), 0, 100, None)
    c.add_window_tokens(0, 50)
    c.add_window_request(0)
    c.add_inflight(0, 2_000_000, 3)
    c.record_result(ok_result(rng), None, 100, None)  # unmeasured: not in the slice
    c.record_result(ok_result(rng), 1, 100, None)  # another stage: not in this slice
    c.slice = (0, 1)
    c.record_result(ok_result(rng), 0, 100, None)
    s0, s1 = c.slices[(0, 0)], c.slices[(0, 1)]
    assert (s0.requests_ok, s0.error_count, s0.window_output_tokens, s0.inflight_us) == (1, 1, 50, 2_000_000)
    assert s1.requests_ok == 1 and c.stages[0].requests_ok == 3 and c.stages[0].window_output_tokens == 50
    assert c.pop_slice(0, 0) is s0 and (0, 0) not in c.slices
    assert c.pop_slice(0, 7).is_empty()  # a slice nothing came to


def test_slices_ship_and_merge_exactly():
    rng = np.random.default_rng(2)
    workers, one = [Collector(), Collector()], Collector()
    for i in range(40):
        result = ok_result(rng) if i % 7 else failed_result(OVERLOAD_429)
        for c in (workers[i % 2], one):
            c.slice = (3, i // 20)
            c.record_result(result, 3, 100, None)
    master = Collector()
    for w in workers:
        master.merge_delta(msgpack.unpackb(msgpack.packb(w.take_delta()), strict_map_key=False))
        assert w.slices == {}
    assert master.slices == one.slices and master.stages == one.stages
    merged = StageStats()
    for piece in master.slices.values():
        merged.merge(piece)
    assert merged == master.stages[3]  # every request completed in a slice: the slices add up to the stage


def test_slice_row_uses_the_stage_formulas_and_flags_few_samples():
    rng = np.random.default_rng(3)
    s = StageStats()
    for _ in range(10):
        s.add_result(ok_result(rng), 100, None)
    s.add_result(failed_result(OVERLOAD_429), 100, None)
    s.window_output_tokens, s.inflight_us = 500, 20_000_000
    row = slice_row(0, 4, 40.0, 10.0, s, 10.0, {"kv_usage_mean": 0.5}, {"cpu_percent": 12.0})
    assert list(row) == list(SLICE_COLUMNS)
    assert row["output_tokens_per_s"] == 50.0 and row["concurrency_mean"] == 2.0
    assert row["ttft_p99_s"] == s.ttft_s.quantile(0.99) and row["tpot_p99_s"] == s.tpot_s.quantile(0.99)
    assert row["error_rate"] == pytest.approx(1 / 11) and row["errors"] == {OVERLOAD_429: 1}
    assert row["few_samples"] is True and row["partial"] is False
    assert row["server_kv_usage_mean"] == 0.5 and row["client_cpu_percent"] == 12.0
    for _ in range(FEW_SAMPLES - 10):
        s.add_result(ok_result(rng), 100, None)
    assert slice_row(0, 4, 40.0, 5.0, s, 10.0)["few_samples"] is False
    assert slice_row(0, 4, 40.0, 5.0, s, 10.0)["partial"] is True


def test_slice_book_closes_each_slice_after_its_grace_then_the_partial_last_one():
    rng = np.random.default_rng(4)
    clock, c, cuts = FakeClock(), Collector(), []
    book = SliceBook(10.0, c, grace_s=2.0, clock=clock, cut_server=lambda first: cuts.append(first) or {"preemptions": len(cuts)},
                     client_now=lambda: {"cpu_percent": 1.0})
    book.opened(0)
    c.slice = (0, 0)
    c.record_result(ok_result(rng), 0, 100, None)
    clock.t += 10.5
    c.slice = (0, 1)
    assert book.tick() == [] and cuts == [True, False]  # the boundary is cut at once, the row waits
    clock.t += 1.6
    (row,) = book.tick()
    assert (row["stage"], row["slice"], row["requests"], row["server_preemptions"]) == (0, 0, 1, 2)
    c.record_result(ok_result(rng), 0, 100, None)
    clock.t += 3.0  # 15.1 s: the window closes
    book.window_closed(0, 15.1)
    assert book.tick() == []
    clock.t += 2.1
    (last,) = book.tick()
    assert last["partial"] and last["duration_s"] == pytest.approx(5.1) and last["requests"] == 1
    assert book.stage is None and [r["slice"] for r in book.rows] == [0, 1] and c.slices == {}


def test_slice_book_forced_closes_the_slice_under_way():
    clock, c = FakeClock(), Collector()
    book = SliceBook(10.0, c, grace_s=7.0, clock=clock)
    book.opened(2)
    clock.t += 23.0
    rows = book.tick(force=True)
    assert [(r["slice"], r["duration_s"], r["partial"]) for r in rows] == [(0, 10, False), (1, 10, False), (2, 3, True)]


def test_slices_csv_appends_and_reads_back(tmp_path):
    rng = np.random.default_rng(5)
    s = StageStats()
    for _ in range(3):
        s.add_result(ok_result(rng), 100, None)
    s.add_result(failed_result(OVERLOAD_429), 100, None)
    rows = [slice_row(0, j, 10.0 * j, 10.0, s, 10.0) for j in range(3)]
    path = tmp_path / "slices.csv"
    append_slice_rows(path, rows[:2])
    append_slice_rows(path, rows[2:])
    with open(path, "a") as f:
        f.write("0,3,30,10,fal")  # a line cut by a kill mid-write
    back = read_slice_rows(path)
    assert len(back) == 3 and back[1]["errors"] == {OVERLOAD_429: 1} and back[2]["few_samples"] is True
    assert back[0]["ttft_p99_s"] == pytest.approx(rows[0]["ttft_p99_s"], rel=1e-5)
    assert read_slice_rows(tmp_path / "none.csv") == []


def test_a_window_a_tick_past_its_duration_makes_no_sliver_of_a_slice():
    rng = np.random.default_rng(6)
    clock, c = FakeClock(), Collector()
    book = SliceBook(3.0, c, grace_s=0.0, clock=clock)
    book.opened(0)
    for j in range(4):  # a worker's clock moved on to slice 3 in the window's last 11 ms
        c.slice = (0, j)
        c.record_result(ok_result(rng), 0, 100, None)
    clock.t += 9.011
    book.window_closed(0, 9.011)
    clock.t += 0.01
    rows = book.tick()
    assert [(r["slice"], r["requests"]) for r in rows] == [(0, 1), (1, 1), (2, 2)]
    assert rows[-1]["duration_s"] == pytest.approx(3.011) and not rows[-1]["partial"] and c.slices == {}


def test_report_build_takes_the_slices_summary_json_missed_from_slices_csv(tmp_path):
    from loadgen.run_folder.slices_csv import with_csv_slices

    rows = [slice_row(0, j, 10.0 * j, 10.0, StageStats(), 10.0) for j in range(5)]
    append_slice_rows(tmp_path / "slices.csv", rows)
    live = {"stages": [], "slices": rows[-2:], "slices_total": 5}  # a live summary: the newest only
    assert [r["slice"] for r in with_csv_slices(tmp_path, live)["slices"]] == [0, 1, 2, 3, 4]
    final = {"stages": [], "slices": rows}
    assert with_csv_slices(tmp_path, final) is final


def test_the_console_line_of_a_closed_slice_marks_a_p99_of_few_requests():
    from loadgen.run.console import slice_line

    row = slice_row(0, 17, 1020.0, 60.0, StageStats(), 60.0)
    row.update(output_tokens_per_s=2912.4, ttft_p99_s=1.2041, requests=1803, few_samples=False,
               error_count=2, errors={OVERLOAD_429: 2})
    assert slice_line(row, "C=64", 14400) == ("llm-loadgen: stage 0 C=64 slice 17: 1,080/14,400 s, 2,912 tok/s, "
                                              "TTFT p99 1,204 ms, 1,803 ok, 2 errors (429:2)")
    row.update(few_samples=True, requests=40)
    assert "TTFT p99 ~1,204 ms, 40 ok" in slice_line(row, "C=64", 14400)
