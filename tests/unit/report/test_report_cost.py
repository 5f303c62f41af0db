"""Cost and percentile limits in the reports: the Pareto plot, report.html, compare, stages.csv."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from loadgen.report.compare import compare_rows, format_compare_table
from loadgen.report.html import render_report_html
from loadgen.report.plots import build_run_figures, pareto_figure
from loadgen.report.table import format_stage_row, stages_csv_text
from loadgen.stats.cost import CostConfig, stage_cost
from tests.support.summaries import recorded_summary

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def priced(summary: dict, gpus: int, usd: float) -> dict:
    """The fixture run as if it had been run with --gpus/--gpu-hour-usd."""
    out = copy.deepcopy(summary)
    for st in out["stages"]:
        st.update(stage_cost(st, CostConfig(gpus=gpus, gpu_hour_usd=usd)))
    return out


@pytest.fixture
def seeds():
    return recorded_summary("seeds_sweep")


def test_pareto_plot_marks_the_front_and_only_with_gpus(seeds):
    assert "pareto" not in build_run_figures(seeds)
    run = priced(seeds, gpus=8, usd=2.0)
    assert "pareto" in build_run_figures(run)
    last = run["stages"][-1]  # past saturation: slower per user and less per GPU than the stage before
    run["stages"].append(dict(last, concurrency=2 * last["concurrency"], decode_tps_p50=last["decode_tps_p50"] / 2,
                              output_tokens_per_gpu_per_s=last["output_tokens_per_gpu_per_s"] * 0.9))
    ax = pareto_figure(run["stages"]).axes[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    stages = [s for s in run["stages"] if s.get("decode_tps_p50") is not None]
    assert list(lines["stages"].get_ydata()) == [s["output_tokens_per_gpu_per_s"] for s in stages]
    fx, fy = list(lines["Pareto front"].get_xdata()), list(lines["Pareto front"].get_ydata())
    # on the front: no stage is at least as fast per user and as productive per GPU, better in one
    for x, y in zip(fx, fy, strict=True):
        assert not any(s["decode_tps_p50"] >= x and s["output_tokens_per_gpu_per_s"] >= y
                       and (s["decode_tps_p50"] > x or s["output_tokens_per_gpu_per_s"] > y) for s in stages)
    front = list(zip(fx, fy, strict=True))
    off = [s for s in stages if (s["decode_tps_p50"], s["output_tokens_per_gpu_per_s"]) not in front]
    assert [s["concurrency"] for s in off] == [2 * last["concurrency"]]
    for s in off:  # ... and every stage off the front is beaten by one on it
        assert any(x >= s["decode_tps_p50"] and y >= s["output_tokens_per_gpu_per_s"] for x, y in front)
    assert [t.get_text() for t in ax.texts] == [f"C={s['concurrency']}" for s in stages]


def test_report_html_says_the_cheapest_stage(seeds):
    run = priced(seeds, gpus=8, usd=2.0)
    best = min(run["stages"], key=lambda s: s["usd_per_million_output_tokens"] or float("inf"))
    html = render_report_html(run)
    assert f"per million output tokens at C={best['concurrency']}" in html
    assert "per million output tokens" not in render_report_html(seeds)


def test_compare_has_the_cost_figures_and_the_text_table_shows_them_when_priced(seeds):
    runs = [("a", priced(seeds, 8, 2.0)), ("b", priced(seeds, 4, 2.0))]
    rows = compare_rows(runs)
    r = next(r for r in rows if r["concurrency"] == 32)
    a, b = r["usd_per_million_output_tokens"]
    assert b == pytest.approx(a / 2)  # the same throughput on half the GPUs costs half
    text = format_compare_table(runs)
    assert "$ per M output tok" in text and "Output tok/s per GPU" in text
    assert "$ per M output tok" not in format_compare_table([("a", seeds), ("b", seeds)])


def test_stages_csv_flattens_the_percentile_verdicts():
    stage = {"index": 0, "concurrency": 8, "flags": ["slo_fail"],
             "slo": {"attainment": 1.0, "pass": False, "failed": ["ttft_p99_s"],
                     "limits": {"ttft_p99_s": {"measured_s": 2.5, "limit_s": 2.0, "pass": False, "samples": 9}}}}
    head, row = stages_csv_text([stage]).splitlines()
    cells = dict(zip(head.split(","), row.split(","), strict=True))
    assert cells["slo.limits.ttft_p99_s.measured_s"] == "2.5" and cells["slo.limits.ttft_p99_s.pass"] == "False"
    assert cells["slo.failed"] == "ttft_p99_s"


def test_the_tables_name_the_failed_limit_beside_slo_fail(seeds):
    stage = dict(seeds["stages"][3], flags=["slo_fail"],
                 slo={"attainment": 0.5, "pass": False, "failed": ["attainment", "tpot_p90_s", "ttft_p99_s"]})
    assert format_stage_row(stage).endswith(" slo_fail(tpot_p90_s,ttft_p99_s)")
    html = render_report_html(dict(seeds, stages=[stage]))
    assert "<td>slo_fail(tpot_p90_s,ttft_p99_s)</td>" in html
    attainment_only = dict(stage, slo={"attainment": 0.5, "pass": False, "failed": ["attainment"]})
    assert format_stage_row(attainment_only).endswith(" slo_fail")
