"""Open-loop rows in the report: the rate is the x axis, the first table column, the knee's unit."""

from __future__ import annotations

from loadgen.report.plots import latency_figure, throughput_figure
from loadgen.report.table import format_stage_header, format_stage_row, format_stage_table

STAGES = [{"index": i, "concurrency": None, "offered_rate_per_s": r, "achieved_rate_per_s": a,
           "output_tokens_per_s": 100 * a, "ttft_p50_s": t, "ttft_p99_s": 2 * t, "itl_p50_s": 0.02,
           "itl_p99_s": 0.03, "requests": 10, "error_count": 0, "flags": []}
          for i, (r, a, t) in enumerate([(1, 1, 0.2), (2, 2, 0.2), (4, 2.5, 3.0)])]


def test_x_axis_is_the_offered_rate():
    fig = throughput_figure(STAGES, knee=2)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "offered rate (requests/s)"
    assert list(ax.lines[0].get_xdata()) == [1, 2, 4]
    assert [line.get_label() for line in ax.lines] == ["output tok/s", "knee 2/s"]
    assert latency_figure(STAGES).axes[0].get_xlabel() == "offered rate (requests/s)"


def test_table_shows_the_rate_and_the_knee_in_requests_per_second():
    assert format_stage_header(open_loop=True).split()[0] == "rate"
    assert format_stage_row(STAGES[2]).split()[0] == "4.00/s"
    text = format_stage_table(STAGES, knee=2)
    assert "knee: 2.00 req/s" in text and format_stage_row(STAGES[1], knee=2).endswith("knee")
