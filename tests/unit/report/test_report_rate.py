"""Rate sweeps in every view: a stage whose load was a request rate is named by its rate
(``8 req/s``, or a ``rate`` column in req/s), never ``C=``; the open-loop knee is the highest
offered rate the server sustained, said with the stage that was not sustained and why.

The synthetic sweep offers 1, 2, 4, 8 and 16 req/s; the server follows up to 4 (3.9 achieved)
and then flattens at ~5 req/s, so the knee is 4 req/s and 8 req/s is where it stopped following.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from loadgen.analysis.knee import find_rate_knee, knee_of, rate_knee_text
from loadgen.errors import EXIT_CONFIG, ConfigError
from loadgen.report.__main__ import main
from loadgen.report.compare import compare_figures, compare_rows, format_compare_table, load_runs
from loadgen.report.html import key_findings, render_report_html
from loadgen.report.plots import latency_figure, throughput_figure, tradeoff_figure
from loadgen.report.table import format_notes, format_stage_header, format_stage_row, format_stage_table
from loadgen.stats.stage_load import load_label, load_number, planned_load, stage_label

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
OFFERED_ACHIEVED = [(1, 1.0), (2, 2.0), (4, 3.9), (8, 5.1), (16, 5.0)]
STAGES = [{"index": i, "concurrency": None, "offered_rate_per_s": r, "achieved_rate_per_s": a,
           "output_tokens_per_s": 100 * a, "decode_tps_p50": 50 - 2 * i, "ttft_p50_s": 0.2 + 0.01 * i,
           "ttft_p99_s": 0.5, "itl_p50_s": 0.02, "itl_p99_s": 0.03, "requests": 400, "error_count": 0,
           "flags": []}
          for i, (r, a) in enumerate(OFFERED_ACHIEVED)]
GUARD = {"capacity_tokens": 100_000, "capacity_source": "scenario", "margin": 0.1, "action": "abort",
         "stopped_before": 32, "clamped_to": None, "breaches": 1, "max_concurrency": 45}


def rate_summary(stages=STAGES) -> dict:
    """A rate sweep's summary.json as build_summary writes it (knee.rate_per_s, concurrency None)."""
    summary = json.loads((FIXTURES / "summary_vllm_sweep.json").read_text())
    summary.update(stages=copy.deepcopy(stages), guard=dict(GUARD),
                   knee={"concurrency": None, "threshold": 0.1, "rate_per_s": find_rate_knee(stages)})
    for s in summary["stages"]:
        s["flags"] = ["knee"] if s["offered_rate_per_s"] == 4 else []
    return summary


def test_labels_name_a_rate_by_its_rate_and_a_concurrency_by_c():
    assert load_label(8, rate=False) == "C=8" and load_label(8.0, rate=True) == "8 req/s"
    assert load_label(0.5, rate=True) == "0.5 req/s" and load_label(None, rate=True) == "none"
    assert load_number(7.4833333) == "7.48" and load_number(16.0) == "16" and load_number(123.4) == "123"
    assert stage_label(STAGES[3]) == "8 req/s" and stage_label({"concurrency": 64}) == "C=64"
    # a stage that lost a worker offered less than asked; compare matches it by what was asked
    lost = dict(STAGES[3], offered_rate_per_s=7.5, planned_rate_per_s=8)
    assert stage_label(lost) == "7.5 req/s" and planned_load(lost) == 8


def test_the_knee_is_where_achieved_stops_following_offered_and_says_so():
    summary = rate_summary()
    assert find_rate_knee(STAGES) == 4 and knee_of(summary) == 4
    del summary["knee"]  # an older summary without a knee: computed from the rate stages
    assert knee_of(summary) == 4
    assert rate_knee_text(STAGES) == ("4 req/s (the highest offered rate sustained; at 8 req/s the server "
                                      "achieved 5.1 req/s, under 90% of the offered rate)")
    # a queue in front of a server that still completes the rate: TTFT p50 grows without bound
    slow = [dict(s, achieved_rate_per_s=s["offered_rate_per_s"], ttft_p50_s=t)
            for s, t in zip(STAGES, (0.2, 0.2, 0.3, 1.5, 9.0), strict=True)]
    assert rate_knee_text(slow).startswith("4 req/s (the highest offered rate sustained; at 8 req/s TTFT p50 "
                                           "was 7.5x the lowest rate's")
    assert rate_knee_text(STAGES[:3]) == "none found (every offered rate up to 4 req/s was sustained)"
    saturated = [dict(s, achieved_rate_per_s=0.5) for s in STAGES[:2]]
    assert rate_knee_text(saturated) == ("none found (already the lowest offered rate, 1 req/s, was not "
                                         "sustained: the server achieved 0.5 req/s, under 90% of the offered rate)")


def test_console_table_names_the_rate_column_and_the_knee_and_guard_in_req_s():
    header = format_stage_header(open_loop=True).split("\n")
    assert header[0].split()[0] == "rate" and header[1].split()[0] == "req/s"
    assert format_stage_row(STAGES[2]).split()[0] == "4"
    assert format_stage_row(STAGES[2], knee=4).endswith("knee")
    text = format_stage_table(STAGES, knee=4, guard=GUARD)
    assert "C=" not in text
    notes = format_notes(STAGES, 4, GUARD)
    assert notes == [
        "knee: 4 req/s (the highest offered rate sustained; at 8 req/s the server achieved 5.1 req/s, "
        "under 90% of the offered rate)",
        "KV ceiling: 45 requests in flight (the most whose projected KV use fits 100,000 tokens; offered rate "
        "x E2E mean must stay below it)",
        "guard: stopped before 32 req/s: projected KV use exceeds capacity 100,000 tokens (scenario)",
    ]
    # the guard refused the first rate: no stage row says the mode, the caller does
    assert format_notes([], None, GUARD, open_loop=True)[-1].startswith("guard: stopped before 32 req/s:")


def test_report_build_prints_the_rate_knee_from_summary_json(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps(rate_summary()))
    assert main(["build", str(run)]) == 0
    out = capsys.readouterr().out
    assert "knee: 4 req/s (the highest offered rate sustained; at 8 req/s" in out
    assert "guard: stopped before 32 req/s" in out and "C=" not in out.split("wrote")[0]


def test_report_html_key_findings_and_tables_in_req_s():
    summary = rate_summary()
    summary["stages"][4]["error_count"], summary["stages"][4]["errors"] = 3, {"read_timeout": 3}
    key = key_findings(summary, knee_of(summary))
    assert ("Saturation knee: 4 req/s (the highest offered rate sustained; at 8 req/s the server achieved "
            "5.1 req/s, under 90% of the offered rate)") in key
    assert "Peak throughput: 510 output tok/s at 8 req/s" in key and "Errors from 16 req/s: 3 failed" in key
    assert "Guard: stopped before 32 req/s" in key and "KV ceiling: 45 requests in flight" in key
    assert "C=" not in key
    html = render_report_html(summary)
    assert 'class="knee"><td class="n">4<' in html and "<th>rate<br><span class=muted>req/s</span></th>" in html
    assert "<th>rate (req/s)</th><th>read_timeout</th>" in html  # the errors table


def test_plots_label_the_knee_guard_and_points_by_rate():
    ax = throughput_figure(STAGES, knee=4, guard=GUARD).axes[0]
    assert ax.get_xlabel() == "offered rate (requests/s)" and ax.get_title() == "Throughput vs offered rate"
    assert list(ax.lines[0].get_xdata()) == [1, 2, 4, 8, 16]
    assert [line.get_label() for line in ax.lines] == ["output tok/s", "knee 4 req/s", "guard stop 32 req/s"]
    assert "not run: 32 req/s" in ax.texts[0].get_text()
    right = ax.figure.axes[1]  # achieved beside offered: the knee is where they part
    lines = {line.get_label(): list(line.get_ydata()) for line in right.lines}
    assert lines == {"offered req/s": [1, 2, 4, 8, 16], "achieved req/s": [1.0, 2.0, 3.9, 5.1, 5.0]}
    assert latency_figure(STAGES).axes[0].get_xlabel() == "offered rate (requests/s)"
    tradeoff = tradeoff_figure(STAGES, knee=4).axes[0]
    assert [t.get_text() for t in tradeoff.texts] == ["1 req/s", "2 req/s", "4 req/s", "8 req/s", "16 req/s"]
    assert [t.get_text() for t in tradeoff.texts if t.get_fontweight() == "bold"] == ["4 req/s"]


def write_run(root: Path, name: str, summary: dict) -> Path:
    (root / name).mkdir(parents=True)
    (root / name / "summary.json").write_text(json.dumps(summary))
    return root / name


def test_compare_two_rate_sweeps_matches_stages_by_the_rate_asked(tmp_path):
    after = rate_summary([dict(s, output_tokens_per_s=2 * s["output_tokens_per_s"]) for s in STAGES])
    after["stages"][3].update(offered_rate_per_s=7.5, planned_rate_per_s=8)  # a worker was lost
    runs = load_runs([write_run(tmp_path, "before", rate_summary()), write_run(tmp_path, "after", after)])
    rows = {r["offered_rate_per_s"]: r for r in compare_rows(runs)}
    assert sorted(rows) == [1, 2, 4, 8, 16] and rows[8]["output_tokens_per_s"] == pytest.approx([510, 1020])
    lines = format_compare_table(runs).split("\n")
    head = next(i for i, ln in enumerate(lines) if "Output tok/s" in ln)
    assert lines[head].split("|")[0].strip() == "rate" and lines[head + 1].split("|")[0].strip() == "req/s"
    row8 = next(ln for ln in lines if ln.split("|")[0].strip() == "8")
    assert row8.split("|")[1].split() == ["510", "1020", "2.00x"]
    assert "#1 knee: 4 req/s; guard stop: 32 req/s" in lines
    assert not any("C=" in ln for ln in lines)
    ax = compare_figures(runs)["compare_throughput"].axes[0]
    assert ax.get_xlabel() == "offered rate (requests/s)" and len(ax.lines) == 2


def test_compare_refuses_a_rate_sweep_beside_a_concurrency_sweep(tmp_path, capsys):
    closed = json.loads((FIXTURES / "summary_vllm_sweep.json").read_text())
    dirs = [write_run(tmp_path, "closed", closed), write_run(tmp_path, "open", rate_summary())]
    with pytest.raises(ConfigError, match="cannot compare a rate sweep"):
        load_runs(dirs)
    assert main(["compare", *map(str, dirs), "--out", str(tmp_path / "cmp")]) == EXIT_CONFIG
    err = capsys.readouterr().err.strip()
    assert len(err.split("\n")) == 1 and err.startswith("report: compare: cannot compare a rate sweep")
    assert "#1 closed is a concurrency sweep, #2 open is a rate sweep" in err and "--rates" in err
    assert not (tmp_path / "cmp").exists()  # refused before anything was written
