"""The stage table (text) and stages.csv."""

import copy
import csv
import json
from pathlib import Path

import pytest

from loadgen.errors import FAILURE_KINDS
from loadgen.report.table import (
    errors_compact,
    format_stage_header,
    format_stage_row,
    format_stage_table,
    mismatch_compact,
    ms,
    num,
    write_stages_csv,
)
from tests.support.summaries import recorded_summary

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


@pytest.fixture
def seeds():
    return recorded_summary("seeds_sweep")


def test_humane_numbers():
    assert num(None) == "-"
    assert num(0) == "0"
    assert num(2156.4) == "2156"
    assert num(45.24) == "45.2"
    assert num(0.0123) == "0.01"
    assert ms(0.0106) == "10.6"  # seconds in, milliseconds out
    assert ms(9.0) == "9000"
    assert ms(None) == "-"


def test_errors_and_mismatch_compact_forms():
    stage = {
        "errors": {"read_timeout": 2, "overload_429": 5, "connection_reset": 2, "aborted": 0},
        "error_count": 9,
    }
    assert errors_compact(stage) == "9 429:5 reset:2 timeout:2"
    assert errors_compact({"errors": {}, "error_count": 0}) == "0"
    assert errors_compact({"errors": {"weird_kind": 1}}) == "1 weird_kind:1"  # total from kinds
    assert mismatch_compact({"token_mismatch": {"input": 0, "output": 3, "estimated": 1}}) == "out:3 est:1"
    assert mismatch_compact({"token_mismatch": {"input": 0, "output": 0, "estimated": 0}}) == "0"
    assert mismatch_compact({}) == "-"


def test_row_is_aligned_with_header_and_in_humane_units(seeds):
    stage = next(s for s in seeds["stages"] if s["concurrency"] == 32)
    header_names, header_units = format_stage_header().split("\n")
    row = format_stage_row(stage)
    # Each right-aligned numeric column ends at the same character as its header.
    for name, value in (
        ("out tok/s", num(stage["output_tokens_per_s"])),
        ("TTFT p50", ms(stage["ttft_p50_s"])),
        ("ITL p50", ms(stage["itl_p50_s"])),
        ("E2E p50", num(stage["e2e_p50_s"])),
    ):
        end = header_names.index(name) + len(name)
        assert row[:end].endswith(value), (name, value, row)
    assert "ms" in header_units and " s" in header_units
    assert row.split()[0] == "32"
    assert row.split()[1] == str(stage["requests"])


def test_table_has_every_stage_knee_flags_and_guard_note(seeds):
    stages = seeds["stages"]
    text = format_stage_table(stages, knee=256, guard=seeds["guard"])
    lines = text.split("\n")
    legend = [line for line in lines if line.startswith("flag ")]  # one per flag the table shows
    assert [line.split(":")[0] for line in legend] == ["flag knee", "flag server_over_capacity"]
    lines = lines[: len(lines) - len(legend)]
    assert len(lines) == 2 + len(stages) + 2
    rows = {int(line.split()[0]): line for line in lines[2 : 2 + len(stages)]}
    assert sorted(rows) == [s["concurrency"] for s in stages]
    assert rows[256].rstrip().endswith("knee")
    assert "knee" not in rows[128]
    assert "3 timeout:2 reset:1" in rows[512] and "server_over_capacity" in rows[512]
    assert "out:3" in rows[512]
    assert lines[-2].startswith("knee: C=256")
    assert "stopped before C=1024" in lines[-1] and "1,570,000 tokens" in lines[-1]
    assert "sglang_server_info" in lines[-1]


def test_table_without_knee_or_guard_says_so():
    stages = [{"concurrency": c, "output_tokens_per_s": 10.0 * c, "requests": 5} for c in (1, 2)]
    text = format_stage_table(stages, knee=None, guard={"capacity_tokens": None, "stopped_before": None})
    assert "knee: none found" in text
    assert "guard:" not in text
    assert format_stage_table([]).count("\n") == 1  # header only


def test_row_tolerates_missing_fields():
    row = format_stage_row({"concurrency": 4})
    assert row.split()[0] == "4"
    assert "-" in row


def test_csv_flattens_nested_fields_and_keeps_every_error_kind(tmp_path, seeds):
    stages = seeds["stages"]
    path = write_stages_csv(tmp_path / "stages.csv", stages)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(stages)
    columns = rows[0].keys()
    for key in (
        "concurrency",
        "output_tokens_per_s",
        "ttft_p99_s",
        "itl_p50_s",
        "itl_chunk_p50_s",
        "itl_chunk_p90_s",
        "itl_chunk_p99_s",
        "token_mismatch.output",
        "client.cpu_percent",
        "server.num_retracted_requests",
        "flags",
    ):
        assert key in columns, key
    assert all(f"errors.{kind}" in columns for kind in FAILURE_KINDS)
    last = rows[-1]
    assert int(last["concurrency"]) == 512
    assert int(last["errors.read_timeout"]) == 2 and int(last["errors.overload_429"]) == 0
    assert last["flags"] == "server_over_capacity"
    assert float(last["output_tokens_per_s"]) == stages[-1]["output_tokens_per_s"]
    assert int(rows[0]["server.num_retracted_requests"]) == 0
    assert not list(tmp_path.glob(".*.tmp"))  # temp file renamed away


def test_csv_columns_are_stable_across_runs(tmp_path, seeds):
    other = copy.deepcopy(seeds["stages"][:2])
    for s in other:
        s["server"] = {}
    write_stages_csv(tmp_path / "a.csv", seeds["stages"])
    write_stages_csv(tmp_path / "b.csv", other)
    head_a = (tmp_path / "a.csv").read_text().split("\n")[0].split(",")
    head_b = (tmp_path / "b.csv").read_text().split("\n")[0].split(",")
    assert head_b == head_a[: len(head_b)]  # same leading columns; extras (server.*) only appended
    write_stages_csv(tmp_path / "empty.csv", [])
    assert (tmp_path / "empty.csv").read_text().startswith("index,concurrency,")


def test_slo_run_table_has_attainment_and_goodput_columns_and_the_three_answers_together():
    """A real slo-linear run (the scenario of tests/unit/whatif/test_slo_answers.py): knee, SLO maximum, KV ceiling."""
    summary = json.loads((FIXTURES / "summary_slo_search.json").read_text())
    text = format_stage_table(summary["stages"], None, summary["guard"], slo=summary["slo"])
    header, units = text.split("\n")[:2]
    assert "SLO met" in header and "goodput" in header and "%" in units
    rows = text.split("\n")[2 : 2 + len(summary["stages"])]
    assert [r.split()[0] for r in rows] == ["8", "16", "32", "64", "48", "40", "36", "34"]
    assert all(r.rstrip().endswith("slo_search") or "slo_search," in r for r in rows[4:])
    assert "100" in rows[0].split() and "slo_fail" in rows[3]
    notes = [ln for ln in text.split("\n") if not ln.startswith("flag ")][-3:]  # the legend follows
    assert notes[0].startswith("knee: none found")
    assert notes[1] == ("SLO: max concurrency C=34 (99% of requests met tpot_s <= 0.045; C=36 did not; "
                        "search stages C=48, 40, 36, 34)")
    assert notes[2].startswith("KV ceiling: C=178,571 ") and "10,000,000 tokens" in notes[2]
    # without objectives the columns are not there
    assert "SLO met" not in format_stage_table([{"concurrency": 1}])
