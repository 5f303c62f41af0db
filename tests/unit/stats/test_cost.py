"""Cost and efficiency (loadgen.stats.cost): the formulas, the scenario keys and options, the stage row."""

from __future__ import annotations

import argparse

import pytest

from loadgen.config import ConfigError, build_scenario, register_options, scenario_from_options
from loadgen.run.results import GuardLog, StageInfo, stage_row
from loadgen.stats.cost import CostConfig, pareto_front, per_gpu, stage_cost, usd_per_million
from loadgen.stats.stage_stats import StageStats


def test_dollars_per_million_tokens_is_the_hours_price_over_the_hours_tokens():
    # 8 GPUs at $2.50 an hour cost $20/h; 2,000 tok/s is 7.2 M tokens an hour: $20 / 7.2 = $2.777...
    assert usd_per_million(2000.0, 8, 2.5) == pytest.approx(20 / 7.2)
    # twice the throughput halves the price; twice the GPUs doubles it
    assert usd_per_million(4000.0, 8, 2.5) == pytest.approx(usd_per_million(2000.0, 8, 2.5) / 2)
    assert usd_per_million(2000.0, 16, 2.5) == pytest.approx(usd_per_million(2000.0, 8, 2.5) * 2)
    assert usd_per_million(None, 8, 2.5) is None and usd_per_million(0.0, 8, 2.5) is None
    assert usd_per_million(2000.0, None, 2.5) is None and usd_per_million(2000.0, 8, None) is None
    assert per_gpu(2000.0, 8) == 250.0 and per_gpu(2000.0, None) is None and per_gpu(None, 8) is None


def test_stage_cost_counts_prompt_tokens_of_the_window_in_the_total():
    row = {"output_tokens_per_s": 1000.0, "input_tokens": 40_000, "window_s": 10.0}
    got = stage_cost(row, CostConfig(gpus=4, gpu_hour_usd=3.0))
    assert got["output_tokens_per_gpu_per_s"] == 250.0
    assert got["total_tokens_per_gpu_per_s"] == (1000 + 4000) / 4
    assert got["usd_per_million_output_tokens"] == pytest.approx(12 / 3.6)  # $12/h, 3.6 M tok/h
    assert got["usd_per_million_total_tokens"] == pytest.approx(12 / 18)  # 5,000 tok/s = 18 M/h
    assert set(stage_cost(row, CostConfig()).values()) == {None}


def test_pareto_front_keeps_the_stages_no_other_beats_on_both_axes():
    # (tok/s per user, tok/s per GPU): low concurrency is fast per user, high is cheap per GPU
    points = [(60.0, 100.0), (50.0, 300.0), (40.0, 250.0), (30.0, 500.0), (30.0, 500.0), (10.0, 450.0)]
    assert pareto_front(points) == [0, 1, 3, 4]  # (40, 250) is beaten by (50, 300); (10, 450) by (30, 500)
    assert pareto_front([]) == [] and pareto_front([(1.0, 1.0)]) == [0]


def _parse(args: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register_options(parser)
    return parser.parse_args(args)


def test_cost_keys_options_and_their_errors():
    s = scenario_from_options(_parse(["--gpus", "8", "--gpu-hour-usd", "2.5"]))
    assert s.cost == CostConfig(gpus=8, gpu_hour_usd=2.5)
    assert build_scenario(s.to_dict()) == s and build_scenario({}).cost == CostConfig()
    assert build_scenario({"cost": {"gpus": 2}}).cost == CostConfig(gpus=2)  # per GPU, no price
    with pytest.raises(ConfigError, match=r"cost.gpu_hour_usd.*needs cost.gpus.*--gpus 8"):
        build_scenario({"cost": {"gpu_hour_usd": 2.5}})
    with pytest.raises(ConfigError, match=r"cost.gpus \(from --gpus\).*must be >= 1"):
        scenario_from_options(_parse(["--gpus", "0"]))


def test_the_stage_row_carries_the_cost_figures():
    stats = StageStats()
    stats.window_output_tokens, stats.input_tokens = 20_000, 10_000
    info = StageInfo(0, 8, window_s=10.0, users=8)
    client = {"cpu_percent": 1.0, "loop_lag_p99_s": 0.0}
    row = stage_row(info, stats, GuardLog(), client, False, cost=CostConfig(gpus=2, gpu_hour_usd=1.8))
    assert row["output_tokens_per_gpu_per_s"] == 1000.0 and row["total_tokens_per_gpu_per_s"] == 1500.0
    assert row["usd_per_million_output_tokens"] == pytest.approx(3.6 / 7.2)  # $3.60/h, 7.2 M tok/h
    plain = stage_row(info, stats, GuardLog(), client, False)
    assert plain["output_tokens_per_gpu_per_s"] is None and plain["usd_per_million_total_tokens"] is None
