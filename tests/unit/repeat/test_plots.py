"""Plots and pages of repeated sweeps: a repeat folder's intervals, the coverage bench's report."""

from __future__ import annotations

import json
import math

import pytest

from loadgen.repeat.plots import coverage_figure, covered_figure, intervals_figure
from loadgen.repeat.report_files import coverage_table, write_coverage_report, write_repeat_report
from loadgen.repeat.summary import SHOWN, repeat_summary


def _summary(k: int) -> dict:
    """Repetition k: output tok/s 100 x C + k, TTFT p50 (20 + k) ms; C=64 only in repetitions 0 and 1."""
    loads = (4, 16, 64) if k < 2 else (4, 16)
    stages = [{"index": i, "concurrency": c, "search": False, "output_tokens_per_s": 100.0 * c + k,
               "ttft_p50_s": 0.020 + k / 1000, "requests": 10, "error_count": 0} for i, c in enumerate(loads)]
    return {"knee": {"concurrency": 16}, "slo": None, "guard": {"max_concurrency": 512}, "scenario": {},
            "stages": stages}


@pytest.fixture(scope="module")
def repeat() -> dict:
    reps = [{"folder": f"run{k}", "prompt_seed": k, "arrival_seed": None, "exit_code": 0} for k in range(4)]
    return repeat_summary([_summary(k) for k in range(4)], reps)


def test_intervals_figure_draws_every_repetition_the_mean_and_its_interval(repeat):
    fig = intervals_figure(repeat)
    assert [ax.get_title() for ax in fig.axes] == ["Output tok/s", "TTFT p50 (ms)", "TTFT p99 (ms)", "ITL p50 (ms)"]
    assert len(fig.axes) == len(SHOWN)
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.lines}
    assert list(lines["mean"].get_xdata()) == [4, 16, 64]
    assert list(lines["mean"].get_ydata()) == pytest.approx([401.5, 1601.5, 6400.5])
    dots = sorted(zip(lines["repetitions"].get_xdata(), lines["repetitions"].get_ydata(), strict=True))
    assert dots[:4] == [(4, 400.0), (4, 401.0), (4, 402.0), (4, 403.0)] and len(dots) == 4 + 4 + 2
    (bars,) = [c for c in ax.collections if c.get_label() == "95 % interval"]
    segments = bars.get_segments()
    by_load = {s[0][0]: (s[0][1], s[1][1]) for s in segments}
    stage16 = next(s for s in repeat["stages"] if s["load"] == 16)["metrics"]["output_tokens_per_s"]
    assert by_load[16] == pytest.approx((stage16["low"], stage16["high"]))
    assert set(by_load) == {4, 16, 64}
    ttft = {line.get_label(): line for line in fig.axes[1].lines}["mean"]
    assert list(ttft.get_ydata()) == pytest.approx([21.5, 21.5, 20.5])  # shown in ms
    assert not fig.axes[2].lines  # no TTFT p99 in these rows: an empty panel


def _rows() -> list[dict]:
    """Two metrics x two loads x 3 experiments; the interval of experiment 2 at load 20 misses."""
    rows = []
    for m in range(3):
        for load in (10, 20):
            for metric, truth in (("achieved_rate_per_s", load), ("output_tokens_per_s", 40.0 * load)):
                mid = truth * (1.3 if (m, load) == (2, 20) else 1.02)
                rows.append({"experiment": m, "metric": metric, "load": load, "truth": truth, "low": mid * 0.9,
                             "mid": mid, "high": mid * 1.1, "covered": mid * 0.9 <= truth <= mid * 1.1})
    return rows


def test_coverage_table_counts_hits_with_the_binomial_standard_error():
    table = coverage_table(_rows())
    assert [t["metric"] for t in table] == ["achieved_rate_per_s", "output_tokens_per_s", "all"]
    assert [(t["covered"], t["n"]) for t in table] == [(5, 6), (5, 6), (10, 12)]
    assert table[2]["share"] == pytest.approx(10 / 12)
    assert table[2]["se"] == pytest.approx(math.sqrt(10 / 12 * 2 / 12 / 12))
    with pytest.raises(ValueError, match="no intervals"):
        coverage_table([])


def test_covered_figure_draws_each_interval_relative_to_the_truth_coloured_by_outcome():
    fig = covered_figure(_rows())
    assert len(fig.axes) == 2
    ax = fig.axes[0]
    colls = {c.get_label(): c for c in ax.collections}
    covered, missed = colls["covered (5)"], colls["missed (1)"]
    (seg,) = missed.get_segments()
    assert seg[0][0] == 5 and (seg[0][1], seg[1][1]) == pytest.approx((1.3 * 0.9, 1.3 * 1.1))  # load 20, exp 2: last
    assert all((s[0][1], s[1][1]) == pytest.approx((1.02 * 0.9, 1.02 * 1.1)) for s in covered.get_segments())
    assert tuple(covered.get_colors()[0][:3]) != tuple(missed.get_colors()[0][:3])
    truth = {line.get_label(): line for line in ax.lines}["true value"]
    assert list(truth.get_ydata()) == [1.0, 1.0]
    assert [t.get_text() for t in ax.texts] == ["10", "20"]
    assert [t.get_text() for t in covered_figure(_rows(), "req/s").axes[1].texts] == ["10 req/s", "20 req/s"]


def test_coverage_figure_bars_are_the_shares_with_their_error_bars():
    table = coverage_table(_rows())
    ax = coverage_figure(table, target=0.9).axes[0]
    heights = [p.get_height() for p in ax.patches]
    assert heights == pytest.approx([100 * 5 / 6, 100 * 5 / 6, 100 * 10 / 12])
    assert [t.get_text() for t in ax.texts] == ["5/6", "5/6", "10/12"]
    labels = {line.get_label() for line in ax.lines}
    assert {"nominal 95%", "target 90%"} <= labels
    (caps,) = [c for c in ax.collections]  # the error bars: one segment per bar, +- 1 SE
    lows_highs = [(s[0][1], s[1][1]) for s in caps.get_segments()]
    assert lows_highs[2] == pytest.approx((100 * (10 / 12 - table[2]["se"]), 100 * (10 / 12 + table[2]["se"])))


def test_repeat_folder_report_has_the_intervals_plot_and_each_repetition(repeat, tmp_path):
    written = write_repeat_report(tmp_path, repeat)
    assert (tmp_path / "intervals.png").read_bytes().startswith(b"\x89PNG") and "intervals" in written
    html = (tmp_path / "report.html").read_text()
    assert 'alt="intervals"' in html and "4 repetitions of one sweep" in html
    assert html.count("<tr>") >= 5 and "run3" in html and "knee" in html and 'id="method"' in html


def test_coverage_report_writes_its_figures_json_and_page(tmp_path):
    table = write_coverage_report(tmp_path, _rows(), {"experiments": 3, "command": "bench/repeat_coverage.py"}, 0.9)
    saved = json.loads((tmp_path / "coverage.json").read_text())
    assert saved["coverage"] == table and len(saved["intervals"]) == 12 and saved["target"] == 0.9
    html = (tmp_path / "report.html").read_text()
    assert 'alt="coverage"' in html and 'alt="intervals"' in html
    assert "all: 10 of 12 intervals hold the true value, 83.3% (+- 10.8%, 1 binomial SE)" in html
    assert html.count("MISSED") == 2
