"""Plots: check the plotted series from the Figure objects, not the pixels."""

import json
from pathlib import Path

import pytest

from loadgen.report.plots import (
    LABEL_OFFSETS_PT,
    build_run_figures,
    figure_png,
    label_offsets,
    latency_figure,
    save_figures,
    throughput_figure,
    tradeoff_figure,
)
from tests.support.summaries import recorded_summary

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def seeds():
    return recorded_summary("seeds_sweep")


def lines_by_label(ax):
    return {line.get_label(): line for line in ax.lines}


def test_throughput_series_knee_and_guard_stop(seeds):
    stages = seeds["stages"]
    fig = throughput_figure(stages, knee=256, guard=seeds["guard"])
    ax = fig.axes[0]
    lines = lines_by_label(ax)
    main = lines["output tok/s"]
    assert list(main.get_xdata()) == [s["concurrency"] for s in stages]
    assert list(main.get_ydata()) == [s["output_tokens_per_s"] for s in stages]
    knee = lines["knee C=256"]
    tput_256 = next(s["output_tokens_per_s"] for s in stages if s["concurrency"] == 256)
    assert list(knee.get_xdata()) == [256] and list(knee.get_ydata()) == [tput_256]
    stop = lines["guard stop C=1024"]
    assert list(stop.get_xdata()) == [1024, 1024]  # a vertical line at the stopped stage
    notes = " ".join(t.get_text() for t in ax.texts)
    assert "C=1024" in notes and "1.57M tokens" in notes
    assert ax.get_xscale() == "log"
    assert [int(t) for t in ax.get_xticks()] == [1, 4, 16, 32, 64, 128, 256, 512, 1024]
    assert [t.get_text() for t in ax.get_xticklabels()][-1] == "1024"


def test_throughput_without_knee_or_guard_has_only_the_curve(seeds):
    ax = throughput_figure(seeds["stages"][:3], knee=None, guard={"stopped_before": None}).axes[0]
    assert list(lines_by_label(ax)) == ["output tok/s"]
    # A knee that is not one of the plotted stages is not drawn.
    ax = throughput_figure(seeds["stages"][:3], knee=999).axes[0]
    assert list(lines_by_label(ax)) == ["output tok/s"]


def test_latency_series_are_in_milliseconds(seeds):
    stages = seeds["stages"]
    fig = latency_figure(stages)
    ttft = lines_by_label(fig.axes[0])
    itl = lines_by_label(fig.axes[1])
    assert set(ttft) == {"TTFT p50", "TTFT p99"} and set(itl) == {"ITL p50", "ITL p99"}
    assert list(ttft["TTFT p99"].get_ydata()) == pytest.approx([s["ttft_p99_s"] * 1000 for s in stages])
    assert list(itl["ITL p50"].get_ydata()) == pytest.approx([s["itl_p50_s"] * 1000 for s in stages])
    assert list(itl["ITL p50"].get_xdata()) == [s["concurrency"] for s in stages]
    assert fig.axes[0].get_yscale() == "log"


def test_latency_skips_missing_points():
    stages = [
        {"concurrency": 1, "ttft_p50_s": 0.1, "ttft_p99_s": None, "itl_p50_s": 0.01},
        {"concurrency": 2, "ttft_p50_s": 0.2, "ttft_p99_s": 0.5, "itl_p50_s": None},
    ]
    fig = latency_figure(stages)
    ttft = lines_by_label(fig.axes[0])
    assert list(ttft["TTFT p50"].get_xdata()) == [1, 2]
    assert list(ttft["TTFT p99"].get_xdata()) == [2]
    assert "ITL p99" not in lines_by_label(fig.axes[1])


def test_tradeoff_points_are_labelled_by_concurrency(seeds):
    stages = seeds["stages"]
    ax = tradeoff_figure(stages, knee=256).axes[0]
    line = lines_by_label(ax)["stages"]
    assert list(line.get_xdata()) == [s["output_tokens_per_s"] for s in stages]
    assert list(line.get_ydata()) == [s["decode_tps_p50"] for s in stages]
    labels = [t.get_text() for t in ax.texts]
    assert labels == [f"C={s['concurrency']}" for s in stages]
    bold = [t.get_text() for t in ax.texts if t.get_fontweight() == "bold"]
    assert bold == ["C=256"]


def _overlaps(fig) -> list[tuple[str, str]]:
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in fig.axes[0].texts]
    return [(a, b) for i, (a, ba) in enumerate(boxes) for b, bb in boxes[i + 1:] if ba.overlaps(bb)]


def test_tradeoff_labels_do_not_overlap_where_the_curve_bends(seeds):
    # past the knee, throughput is flat while per-request speed falls: C=256 and C=512 sit close
    assert _overlaps(tradeoff_figure(seeds["stages"], knee=256)) == []
    crowded = [{"concurrency": c, "output_tokens_per_s": 3000.0 + c / 100, "decode_tps_p50": 30.0 - c / 100}
               for c in (64, 128, 256, 512, 1024)]
    assert _overlaps(tradeoff_figure(crowded)) == []


def test_label_offsets_keep_far_points_at_the_default_place():
    assert label_offsets([(0, 0), (500, 500)], ["C=1", "C=2"]) == [LABEL_OFFSETS_PT[0]] * 2
    first, second = label_offsets([(100, 100), (101, 101)], ["C=256", "C=512"])
    assert first == LABEL_OFFSETS_PT[0] and second != first


def test_empty_run_still_draws(tmp_path):
    figures = build_run_figures({"stages": [], "guard": {}})
    assert set(figures) == {"throughput", "latency", "tradeoff"}
    pngs = save_figures(figures, tmp_path)
    for name, png in pngs.items():
        assert png.startswith(PNG_MAGIC)
        assert (tmp_path / f"{name}.png").read_bytes() == png
    assert "no measured stages" in [t.get_text() for t in figures["throughput"].axes[0].texts]


def test_build_run_figures_computes_knee_when_summary_has_none(seeds):
    summary = dict(seeds)
    del summary["knee"]
    figures = build_run_figures(summary)
    assert "knee C=256" in lines_by_label(figures["throughput"].axes[0])
    png = figure_png(figures["tradeoff"])
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000


def test_throughput_marks_goodput_the_slo_maximum_the_search_and_the_kv_ceiling(seeds):
    summary = json.loads((FIXTURES / "summary_slo_search.json").read_text())
    ax = build_run_figures(summary)["throughput"].axes[0]
    lines = lines_by_label(ax)
    stages = summary["stages"]
    good = lines["goodput tok/s (met the SLO)"]
    assert list(good.get_xdata()) == sorted(s["concurrency"] for s in stages)
    assert list(lines["SLO search stages"].get_xdata()) == [34, 36, 40, 48]
    assert list(lines["SLO max C=34"].get_xdata()) == [34, 34]
    assert "KV ceiling C=178,571 (off the chart)" in [t.get_text() for t in ax.texts]
    assert [int(t) for t in ax.get_xticks()] == [8, 16, 32, 34, 64]  # search stages are not ticked
    # a ceiling within the plotted range is a vertical line
    guard = dict(seeds["guard"], max_concurrency=785)
    ax = throughput_figure(seeds["stages"], knee=256, guard=guard).axes[0]
    assert list(lines_by_label(ax)["KV ceiling C=785"].get_xdata()) == [785, 785]
    assert "goodput tok/s (met the SLO)" not in lines_by_label(ax)  # no objectives, no goodput


def test_spec_cache_figure_only_when_the_server_reported_its_window_figures():
    plain = [{"index": 0, "concurrency": 1, "tokens_per_chunk": 1.0, "server": {"spec_accept_length": None}}]
    assert "spec_cache" not in build_run_figures({"stages": plain, "guard": {}})
    stages = [
        {"index": 0, "concurrency": 1, "tokens_per_chunk": 2.29, "cached_share": 0.5,
         "server": {"spec_accept_length": 2.3, "prefix_cache_hit_rate": 0.48}},
        {"index": 1, "concurrency": 4, "tokens_per_chunk": 2.1, "cached_share": None,
         "server": {"spec_accept_length": 2.2, "prefix_cache_hit_rate": None}},
    ]
    fig = build_run_figures({"stages": stages, "guard": {}})["spec_cache"]
    spec, cache = (lines_by_label(ax) for ax in fig.axes)
    assert list(spec["server accept length (tokens a step)"].get_ydata()) == [2.3, 2.2]
    assert list(spec["client tokens per chunk"].get_xdata()) == [1, 4]
    assert list(cache["server prefix cache hit rate"].get_ydata()) == [0.48]  # no point without a figure
    assert figure_png(fig).startswith(PNG_MAGIC)
