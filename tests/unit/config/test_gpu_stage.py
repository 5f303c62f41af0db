"""GPU telemetry in a stage's results: --gpu-metrics / gpu_metrics, the cost figures (J/token, kWh per
million tokens), stages.csv columns and the exporter's per-stage GPU series."""

from __future__ import annotations

import argparse

import pytest

from loadgen.config import ConfigError, build_scenario, scenario_from_options
from loadgen.config.options import register_options
from loadgen.export.stage_gauges import stage_families
from loadgen.report.table import stages_csv_text
from loadgen.stats.cost import CostConfig, stage_cost

GPU = {"gpus": 8, "power_w_total": 5040.0, "power_w_mean_per_gpu": 630.0, "util_pct_mean": 97.0,
       "fb_used_mib_max": 77163.0, "energy_j": 151_280.211, "energy_source": "counter", "window_s": 30.0,
       "exporters": 1, "read_errors": 0}


def _parse(args: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register_options(parser)
    return parser.parse_args(args)


def test_gpu_metrics_flag_is_repeatable_and_a_scenario_key():
    s = scenario_from_options(_parse(["--gpu-metrics", "http://n1:9400/metrics", "--gpu-metrics", "http://n2:9400/metrics"]))
    assert s.gpu_metrics == ("http://n1:9400/metrics", "http://n2:9400/metrics")
    assert build_scenario({"gpu_metrics": ["http://n1:9400/metrics"]}).gpu_metrics == ("http://n1:9400/metrics",)
    assert build_scenario({}).gpu_metrics == ()


@pytest.mark.parametrize("value, said", [("http://n1:9400/metrics", "write [http://n1:9400/metrics]"),
                                         (["n1:9400"], "must be an http:// or https:// URL")])
def test_a_bad_gpu_metrics_value_names_the_fix(value, said):
    with pytest.raises(ConfigError) as err:
        build_scenario({"gpu_metrics": value})
    assert said in str(err.value)


def test_joules_per_output_token_is_the_windows_energy_over_its_output_tokens():
    row = {"output_tokens_per_s": 2000.0, "window_s": 30.0, "input_tokens": 0, "gpu": GPU}
    out = stage_cost(row, CostConfig())
    assert out["joules_per_output_token"] == pytest.approx(151_280.211 / 60_000)
    assert out["kwh_per_million_output_tokens"] == pytest.approx(151_280.211 / 60_000 * 1e6 / 3.6e6)
    assert out["usd_per_million_output_tokens"] is None  # no price: only the energy figures
    bare = stage_cost({"output_tokens_per_s": 2000.0, "window_s": 30.0}, CostConfig())
    assert bare["joules_per_output_token"] is None and bare["kwh_per_million_output_tokens"] is None
    no_tokens = stage_cost({"output_tokens_per_s": 0.0, "window_s": 30.0, "gpu": GPU}, CostConfig())
    assert no_tokens["joules_per_output_token"] is None


def test_stages_csv_has_the_gpu_columns_and_the_energy_figures():
    row = {"index": 0, "concurrency": 4, "flags": [], "gpu": GPU, "joules_per_output_token": 2.5}
    header, line = stages_csv_text([row]).splitlines()
    columns = dict(zip(header.split(","), line.split(","), strict=True))
    assert columns["gpu.energy_j"] == "151280.211" and columns["gpu.gpus"] == "8"
    assert columns["gpu.power_w_total"] == "5040.0" and columns["joules_per_output_token"] == "2.5"
    assert "kwh_per_million_output_tokens" in columns


def test_the_exporter_gives_the_stage_gpu_figures_in_base_units():
    row = {"index": 2, "concurrency": 16, "gpu": GPU, "joules_per_output_token": 2.5,
           "kwh_per_million_output_tokens": 0.69}
    fams = {f.name: f for f in stage_families([row], ("job",), ["x"])}
    value = {name: fams[name].samples[0].value for name in fams}
    assert value["llm_loadgen_stage_gpu_power_watts"] == 5040.0
    assert value["llm_loadgen_stage_gpu_utilization_ratio"] == pytest.approx(0.97)
    assert value["llm_loadgen_stage_gpu_memory_used_max_bytes"] == 77163.0 * 1024 * 1024
    assert value["llm_loadgen_stage_gpu_energy_joules"] == 151_280.211
    assert value["llm_loadgen_stage_joules_per_output_token"] == 2.5
    assert value["llm_loadgen_stage_gpus"] == 8
    assert not any("kwh" in name for name in fams)  # not a base unit
    assert fams["llm_loadgen_stage_gpus"].samples[0].labels["stage"] == "2"


def test_a_stage_without_gpu_figures_exports_no_gpu_series():
    fams = [f.name for f in stage_families([{"index": 0, "concurrency": 1}], ("job",), ["x"])]
    assert not any("gpu" in name or "joules" in name for name in fams)


def test_report_html_has_a_gpu_section_and_an_energy_finding_only_with_gpu_figures():
    from loadgen.report.html import render_report_html

    rows = [{"index": 0, "concurrency": 4, "flags": [], "gpu": GPU, "joules_per_output_token": 2.5,
             "kwh_per_million_output_tokens": 0.69},
            {"index": 1, "concurrency": 8, "flags": [], "gpu": GPU, "joules_per_output_token": 1.5,
             "kwh_per_million_output_tokens": 0.42}]
    html = render_report_html({"stages": rows})
    assert "<h2>GPUs</h2>" in html and 'id="gpus"' in html and "energy counter" in html
    assert "Energy: 1.50 J per output token at C=8" in html
    plain = render_report_html({"stages": [{"index": 0, "concurrency": 4, "flags": []}]})
    assert "<h2>GPUs</h2>" not in plain and "J per output token" not in plain


def test_the_console_line_under_a_stage_says_the_gpus_figures():
    from loadgen.report.stage_extras import extras_line

    line = extras_line({"index": 3, "gpu": GPU, "joules_per_output_token": 2.52})
    assert line == ("llm-loadgen: stage 3: 8 GPUs 5040 W (630 W each), util 97%, memory max 77163 MiB, "
                    "2.52 J/output tok")
    assert extras_line({"index": 3}) is None


def test_compare_text_table_adds_j_per_output_token_when_a_run_has_it():
    from loadgen.report.compare import format_compare_table

    def run(joules):
        return {"stages": [{"index": 0, "concurrency": 4, "flags": [], "joules_per_output_token": joules}]}

    with_energy = format_compare_table([("a", run(2.0)), ("b", run(1.0))])
    assert "J per output tok" in with_energy and "2.00     1.00    0.50x" in with_energy
    assert "J per output tok" not in format_compare_table([("a", run(None)), ("b", run(None))])
