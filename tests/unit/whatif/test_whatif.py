"""What-if predictions: known answers from the engine's mechanism, and the command's files."""

from __future__ import annotations

import json

import pytest

from loadgen.sim.config import PRESET_DIR, load
from loadgen.slo.objectives import Objectives
from loadgen.whatif.__main__ import main
from loadgen.whatif.summary import WhatIf, predict
from loadgen.whatif.virtual_sweep import stage_rules

# lockstep known answers: users start together, the plan is ticked after every engine step
PLAN = {"stages": stage_rules(warmup_s=1, duration_s=3, max_warmup_s=10, max_window_s=20, ramp_s=0), "tick_s": 0}
LINEAR = load("slo-linear")  # TPOT(C) = 10 ms + 1 ms x C in lockstep, prefill free


def test_two_replicas_serve_twice_the_users_at_the_latency_of_half():
    one = predict(LINEAR, WhatIf(100, 50, (4,), **PLAN))["stages"][0]
    two = predict(LINEAR, WhatIf(100, 50, (8,), replicas=2, **PLAN))["stages"][0]
    assert two["concurrency"] == 8 and two["tpot_p50_s"] == pytest.approx(0.014) == one["tpot_p50_s"]
    assert two["output_tokens_per_s"] == pytest.approx(2 * one["output_tokens_per_s"], rel=0.01)


def test_slo_maximum_is_the_preset_s_known_answer_and_every_output_says_predicted():
    """tpot_s = 0.045 holds for C <= 35 (10 + C ms), so among 16, 32, 64 the maximum is 32."""
    s = predict(LINEAR, WhatIf(100, 50, (16, 32, 64), **PLAN, objectives=Objectives(tpot_s=0.045)))
    assert s["slo"]["max_concurrency"] == 32 and s["slo"]["bracket"] == [32, 64]
    assert s["predicted"] and all(r["predicted"] and "predicted" in r["flags"] for r in s["stages"])
    assert s["confirm"]["load"] == 32 and s["confirm"]["tpot_p50_s"] == pytest.approx(0.042)
    assert s["guard"]["max_concurrency"] == 10_000_000 // 150


def test_kv_change_moves_the_ceiling_and_preemptions_appear_below_it_no_more():
    small = load("llama8b-1gpu-vllm", {"kv_tokens": 40_000})
    s = predict(small, WhatIf(1000, 1000, (8, 32), **PLAN))
    assert s["guard"]["max_concurrency"] == 20
    assert s["stages"][0]["server"]["preemptions"] == 0 and s["stages"][1]["server"]["preemptions"] > 0


def test_the_command_calibrates_a_run_and_writes_a_predicted_report(tmp_path, capsys):
    truth = load("qwen35-397b-8gpu")
    # a 10 s window: the plan closes a window once C requests of any stage finished in it, and the
    # requests sent in its last request lifetime (2.4 s at C=16) finish under the next stage's load
    stages = {"warmup_s": 1, "duration_s": 10, "max_warmup_s": 10, "max_window_s": 20, "ramp_s": 0}
    measured = predict(truth, WhatIf(500, 200, (1, 4, 16, 64), stages=stage_rules(**stages), tick_s=0))
    run = tmp_path / "run"
    run.mkdir()
    measured["scenario"]["stages"] = stages
    measured["server"]["flavor"] = "sglang"
    (run / "summary.json").write_text(json.dumps(measured))
    preset = tmp_path / "mine.yaml"
    assert main(["calibrate", str(run), "-o", str(preset)]) == 0
    fitted = load(str(preset))
    assert fitted.step_base_ms == pytest.approx(truth.step_base_ms, rel=0.10)
    assert fitted.step_per_seq_ms == pytest.approx(truth.step_per_seq_ms, rel=0.10)
    assert json.loads(preset.with_suffix(".fit.json").read_text())["stage_residuals"]
    out = tmp_path / "whatif"
    assert main(["whatif", str(preset), "--input-tokens", "1000", "--output-tokens", "200", "--stages", "1,8,32",
                 "--spec", "off", "--warmup-s", "1", "--duration-s", "3", "--out", str(out), "--no-plots"]) == 0
    printed = capsys.readouterr().out
    assert "PREDICTED (not measured)" in printed and "confirm (predicted)" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["predicted"] and [r["concurrency"] for r in summary["stages"]] == [1, 8, 32]
    html = (out / "report.html").read_text()
    assert "PREDICTED" in html and "calibration C=16: out tok/s" in html  # the fit's residuals, from .fit.json
    assert main(["whatif", str(preset), "--slo", "ttft=2"]) == 2


def test_spread_brackets_the_prediction_and_is_wide_where_cohorts_form():
    """Speculative accept draws and a client's jitter move a cohort's prefills between steps: the
    range over reseeded runs holds the prediction, and it is not a point at C=16 on the NEXTN preset."""
    s = predict(load("qwen35-397b-8gpu"), WhatIf(1000, 200, (1, 16), **PLAN, spread=3))
    for row in s["stages"]:
        for key in ("output_tokens_per_s", "ttft_p50_s", "tpot_p50_s"):
            lo, hi = row["spread"][key]
            runs = row["spread_runs"][key]
            assert len(runs) == 4 and runs == sorted(runs) and [lo, hi] == [runs[0], runs[-1]]
            assert row[key] == runs[1]  # the median over the runs: the lower middle of 4
    lo, hi = s["stages"][1]["spread"]["ttft_p50_s"]
    assert hi > lo


def test_each_spread_run_moves_the_engine_s_speed_by_one_seeded_factor():
    """A spread run scales every step cost by one factor within 1 +- SPREAD_SPEED (the same server
    ran a few % faster or slower between runs), seeded: the same run k draws the same factor."""
    from loadgen.whatif.summary import SPREAD_SPEED, STEP_COSTS, _reseeded

    cfg = load("qwen35-397b-8gpu")
    factors = set()
    for k in range(1, 9):
        run = _reseeded(cfg, k)
        assert run.seed == cfg.seed + k and run == _reseeded(cfg, k)
        ratios = {key: getattr(run, key) / getattr(cfg, key) for key in STEP_COSTS if getattr(cfg, key)}
        assert len(ratios) >= 3 and max(ratios.values()) == pytest.approx(min(ratios.values()))
        factor = next(iter(ratios.values()))
        assert abs(factor - 1) <= SPREAD_SPEED
        factors.add(round(factor, 9))
    assert len(factors) == 8


def test_open_loop_rates_below_capacity_are_achieved_and_above_it_not():
    """10-token requests alone take 10 steps of 11 ms; batched, a step serves them all, so 5 and 20
    req/s are sustained; 400-token requests at 20 req/s hold ~200 in flight, each step 210+ ms: not."""
    s = predict(LINEAR, WhatIf(100, 10, (5.0, 20.0), open_loop=True, **PLAN))
    for row in s["stages"]:
        assert row["concurrency"] is None and row["achieved_rate_per_s"] == pytest.approx(row["offered_rate_per_s"], rel=0.1)
    assert s["knee"]["rate_per_s"] is None  # every rate sustained
    heavy = predict(LINEAR, WhatIf(100, 400, (1.0, 20.0), open_loop=True, **PLAN))
    assert heavy["stages"][1]["achieved_rate_per_s"] < 0.9 * 20 and heavy["knee"]["rate_per_s"] == 1.0


def test_fewer_slots_queue_the_users_beyond_them(tmp_path, capsys):
    """--max-running 4 (llama.cpp -np 4) with 8 users: 4 run, 4 wait, so TTFT p50 grows by about
    one request lifetime (50 tokens x 14 ms) over the 8-slot server's."""
    preset = tmp_path / "linear.yaml"
    preset.write_text((PRESET_DIR / "slo-linear.yaml").read_text())
    args = ["whatif", str(preset), "--input-tokens", "100", "--output-tokens", "50", "--stages", "8",
            "--warmup-s", "1", "--duration-s", "3", "--no-plots", "--out"]
    assert main([*args, str(tmp_path / "eight")]) == 0
    assert main([*args, str(tmp_path / "four"), "--max-running", "4"]) == 0
    eight, four = (json.loads((tmp_path / name / "summary.json").read_text())["stages"][0] for name in ("eight", "four"))
    assert four["server"]["running_max"] == 4 and four["server"]["waiting_max"] == 4
    assert eight["server"]["waiting_max"] == 0
    assert four["ttft_p50_s"] > eight["ttft_p50_s"] + 0.5
