"""The metric table (loadgen.stats.metrics) and the failure kinds (loadgen.errors): declared once, and
every view of a stage derives from them."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.errors import FAILURE_KINDS, KINDS, OVERLOAD_429, OVERLOAD_503, OVERLOAD_KINDS, short_kind
from loadgen.export import exporter
from loadgen.locust_face import webui
from loadgen.report import table
from loadgen.report.compare import compare_rows, metrics_table_html
from loadgen.stats import metrics
from loadgen.stats.metrics import STAGE_METRICS, Counter, Histogram
from loadgen.stats.stage_stats import StageStats

ROW_HEAD = ["requests", "errors", "error_count", "input_tokens", "output_tokens"]


def test_declarations_are_consistent():
    keys = [m.key for m in STAGE_METRICS]
    assert len(set(keys)) == len(keys)
    for m in STAGE_METRICS:
        if isinstance(m.source, Histogram):
            assert m.source in metrics.HISTOGRAMS and 0 < m.q < 1, m.key
            assert m.unit == m.source.unit, m.key
            assert f"p{round(m.q * 100)}" in m.key, m.key  # the key names its percentile
        elif isinstance(m.source, metrics.Share):  # a ratio of SLO counts (attainment)
            assert m.source.of in metrics.SLO_COUNTS and m.q is None and m.unit == "ratio", m.key
        elif isinstance(m.source, metrics.SloCount):  # an SLO count per second (goodput)
            assert m.source in metrics.SLO_COUNTS and m.q is None and m.unit.endswith("/s"), m.key
        elif isinstance(m.source, metrics.Ratio):  # counter / counter (tokens per chunk, shares)
            assert {m.source.num, m.source.den} <= set(metrics.COUNTERS) and m.q is None, m.key
        elif isinstance(m.source, metrics.CostFigure):  # from the row and the scenario's cost
            assert m in metrics.COST_METRICS and m.q is None and m.unit in ("tok/s", "$", "J", "kWh"), m.key
        else:
            assert m.source in metrics.COUNTERS and m.q is None and m.unit.endswith("/s"), m.key
        assert m.only_if is None or m.only_if in metrics.COUNTERS, m.key
        suffix = {"s": "_s", "tok/s": "_per_s"}.get(m.unit, "")  # a key carries its unit ...
        assert m.key.endswith(suffix) or "decode_tps" in m.key, m.key  # ... or says tps
        assert m.shown.unit in m.title, m.key
    names = [h.exporter for h in metrics.HISTOGRAMS if h.exporter]
    assert len(set(names)) == len(names) and all(n.endswith("_seconds") for n in names)
    for h in metrics.HISTOGRAMS:
        assert bool(h.exporter) == bool(h.edges), h.attr
        assert list(h.edges) == sorted(set(h.edges)), h.attr
    assert all(isinstance(c, Counter) for c in metrics.COUNTERS)


def test_row_is_the_fixed_fields_then_every_metric_in_table_order():
    s = StageStats()
    for v in np.linspace(0.1, 0.3, 101):
        s.ttft_s.add(float(v))
        s.itl_token_s.add(float(v) / 10)
    s.window_output_tokens = 600
    row = s.row(60.0)
    assert list(row) == ROW_HEAD + [m.key for m in STAGE_METRICS] + ["token_mismatch", "textless_requests",
                                                                       "cached_prompt_tokens", "failures"]
    for m in STAGE_METRICS:
        if m.source is metrics.TTFT:
            assert row[m.key] == pytest.approx(0.1 + 0.2 * m.q, rel=0.025), m.key
    assert row["output_tokens_per_s"] == 10.0
    assert row["tpot_p50_s"] is None  # empty histogram
    assert StageStats().row(None)["output_tokens_per_s"] is None  # no window


def test_views_derive_from_the_table():
    keys = [m.key for m in STAGE_METRICS]
    csv_metric_cols = [c for c in table.BASE_COLUMNS if c in keys]
    assert csv_metric_cols == keys
    console = [m for m in STAGE_METRICS if m.console]
    assert [c[0] for c in table.COLUMNS[2:]] == [m.console.title for m in console]
    web_keys = [k for k, _, _ in webui.STAGE_COLUMNS]
    assert [k for k in web_keys if k in keys] == keys
    runs = [("a", {"stages": [{"concurrency": 1, **{k: 0.5 for k in keys}}]}), ("b", {"stages": []})]
    rows = compare_rows(runs)
    assert all(rows[0][k] == [0.5, None] for k in keys)
    html = metrics_table_html(runs)
    assert all(m.title.replace("&", "&amp;") in html for m in STAGE_METRICS)
    exported = {h.exporter for h in exporter.HISTOGRAMS}
    assert exported == {"ttft_seconds", "itl_seconds", "itl_chunk_seconds", "tpot_seconds", "e2e_seconds",
                        "schedule_lateness_seconds", "time_to_first_answer_token_seconds"}


def test_cells_are_in_the_shown_unit():
    by_key = {m.key: m for m in STAGE_METRICS}
    assert by_key["ttft_p50_s"].cell({"ttft_p50_s": 0.0123}) == "12.3"  # seconds shown as ms
    assert by_key["e2e_p50_s"].cell({"e2e_p50_s": 12.34}) == "12.3"
    assert by_key["output_tokens_per_s"].cell({}) == "-"


def test_failure_kinds_are_declared_once_in_errors():
    assert FAILURE_KINDS == tuple(k.key for k in KINDS)
    assert len(set(FAILURE_KINDS)) == len(FAILURE_KINDS)
    shorts = [k.short for k in KINDS]
    assert len(set(shorts)) == len(shorts)
    assert OVERLOAD_KINDS == {OVERLOAD_429, OVERLOAD_503}
    assert short_kind("connection_reset") == "reset" and short_kind("new_kind") == "new_kind"


def test_p95_reaches_summary_csv_compare_and_web_ui_but_not_the_console():
    """ttft_p95_s and itl_p95_s (what vLLM's and SGLang's bench users expect) are one line each in
    STAGE_METRICS; every view picks them up from there."""
    s = StageStats()
    for v in np.linspace(0.01, 1.0, 100):  # TTFT 10 ms .. 1 s, p95 ~ 0.95 s
        s.ttft_s.add(float(v))
        s.itl_token_s.add(float(v) / 100)
    stage = {"index": 0, "concurrency": 4, **s.row(10.0), "window_s": 10.0, "flags": []}
    assert stage["ttft_p95_s"] == pytest.approx(0.95, rel=0.025)
    assert stage["itl_p95_s"] == pytest.approx(0.0095, rel=0.025)
    header, values = table.stages_csv_text([stage]).splitlines()
    csv_row = dict(zip(header.split(","), values.split(","), strict=True))
    assert float(csv_row["ttft_p95_s"]) == stage["ttft_p95_s"]
    assert float(csv_row["itl_p95_s"]) == stage["itl_p95_s"]
    web = webui.display_row(stage)
    assert web["ttft_p95_s"] == table.ms(stage["ttft_p95_s"]) and web["itl_p95_s"] == table.ms(stage["itl_p95_s"])
    titles = {c["title"] for t in webui.template_declarations()["extended_tables"] for c in t["structure"]}
    assert {"TTFT p95 (ms)", "ITL p95 (ms)"} <= titles
    runs = [("a", {"stages": [stage]}), ("b", {"stages": [stage]})]
    assert compare_rows(runs)[0]["itl_p95_s"] == [stage["itl_p95_s"]] * 2
    assert "TTFT p95 (ms)" in metrics_table_html(runs)
    assert "p95" not in table.format_stage_header()  # the console table stays at p50/p90/p99


def test_slo_figures_reach_csv_web_ui_and_compare_and_the_console_only_with_objectives():
    from loadgen.slo.objectives import Objectives

    s = StageStats()
    obj = Objectives(ttft_s=0.5)

    class R:  # the fields a verdict reads
        ok, completion_tokens, ttft_s = True, 10, 0.1

    for i in range(4):
        r = R()
        r.ttft_s = 0.1 if i < 3 else 0.9
        s.slo.add(r, obj)
    s.output_tokens, s.window_output_tokens = 40, 60  # 30 tok/s over 2 s; 30 of the 40 tokens conform
    stage = {"index": 0, "concurrency": 4, **s.row(2.0), "window_s": 2.0, "flags": [],
             "slo": {"attainment": 0.75, "attainment_by": {"ttft_s": 0.75}, "pass": False}}
    assert (stage["slo_attainment"], stage["goodput_requests_per_s"], stage["goodput_output_tokens_per_s"]) \
        == (0.75, 2.25, 22.5)
    header, values = table.stages_csv_text([stage]).splitlines()
    csv_row = dict(zip(header.split(","), values.split(","), strict=True))
    assert float(csv_row["goodput_output_tokens_per_s"]) == 22.5
    assert csv_row["slo.attainment_by.ttft_s"] == "0.75" and csv_row["slo.pass"] == "False"
    web = webui.display_row(stage)
    assert web["slo_attainment"] == "75.0" and web["goodput_requests_per_s"] == "2.25"
    assert compare_rows([("a", {"stages": [stage]})])[0]["goodput_output_tokens_per_s"] == [22.5]
    assert "SLO met" in table.format_stage_header(slo=True) and "SLO met" not in table.format_stage_header()
    row = table.format_stage_row(stage)
    assert " 75.0 " in row and "22.5" in row
    plain = {k: v for k, v in stage.items() if k != "slo"}
    assert len(table.format_stage_row(plain)) < len(row)  # no SLO columns without objectives
