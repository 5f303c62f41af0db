"""``llm-loadgen whatif PRESET --scenario FILE [--set k=v] [flags]``: the sweep a scenario file would
run, read by the run's own loader; precedence file < --set < flags; bad input named."""

from __future__ import annotations

import json

import pytest

from loadgen import cli

PRESET = "llama8b-1gpu-vllm"
SCENARIO = """\
name: mixed
input: {dist: lognormal, mean: 2000, std: 600, min: 200, max: 4000}
output: {dist: uniform, min: 50, max: 150}
stages: {list: [1, 8], warmup_s: 1, duration_s: 4, ramp_s: 2}
"""


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "mixed.yaml"
    path.write_text(SCENARIO)
    return path


def _whatif(tmp_path, *argv) -> dict:
    out = tmp_path / "out"
    assert cli.main(["whatif", PRESET, *argv, "--out", str(out), "--no-plots"]) == 0
    return json.loads((out / "summary.json").read_text())


def test_the_summary_records_the_scenario_s_workload_and_stages(scenario, tmp_path, capsys):
    summary = _whatif(tmp_path, "--scenario", str(scenario))
    sc = summary["scenario"]
    assert sc["input"]["dist"] == "lognormal" and sc["output"] == {"dist": "uniform", "mean": None, "std": None,
                                                                   "min": 50, "max": 150}
    assert sc["predicted_workload"].startswith("input lognormal mean 2000 std 600")
    assert sc["plan"]["ramp_s"] == 2 and summary["predicted_from"]["scenario"] == str(scenario)
    assert [r["concurrency"] for r in summary["stages"]] == [1, 8]
    row = summary["stages"][1]
    assert 50 <= row["output_tokens"] / row["requests"] <= 150 and 200 <= row["input_tokens"] / row["requests"] <= 4000
    assert "PREDICTED (not measured): meta-llama/Llama-3.1-8B-Instruct, input lognormal" in capsys.readouterr().out


def test_the_report_says_the_workload_predicted_and_the_notes_what_is_not(scenario, tmp_path):
    summary = _whatif(tmp_path, "--scenario", str(scenario), "--set", "prompt.shared_prefix_tokens=100",
                      "--stages", "2")
    assert any(n.startswith("not predicted: shared prompt prefixes") for n in summary["notes"])
    html = (tmp_path / "out" / "report.html").read_text()
    assert "Workload predicted: input lognormal mean 2000 std 600" in html


def test_set_overrides_the_file_and_flags_override_set(scenario, tmp_path):
    summary = _whatif(tmp_path, "--scenario", str(scenario), "--set", "output.max=60", "--set", "stages.list=[2,4]",
                      "--stages", "3")
    assert summary["scenario"]["output"]["max"] == 60
    assert [r["concurrency"] for r in summary["stages"]] == [3]
    row = summary["stages"][0]
    assert row["output_tokens"] / row["requests"] <= 60


def test_input_tokens_flag_makes_every_prompt_that_long(scenario, tmp_path):
    summary = _whatif(tmp_path, "--scenario", str(scenario), "--input-tokens", "300", "--stages", "2")
    assert summary["scenario"]["input"]["dist"] == "fixed"
    row = summary["stages"][0]
    assert row["input_tokens"] == 300 * row["requests"]


def test_rates_on_a_closed_loop_scenario_predict_its_arrivals(scenario, tmp_path):
    summary = _whatif(tmp_path, "--scenario", str(scenario), "--set", "rate.arrival=gamma",
                      "--set", "rate.burstiness=0.5", "--rates", "2")
    assert summary["scenario"]["open_loop"] and summary["scenario"]["rate"]["arrival"] == "gamma"
    assert summary["stages"][0]["offered_rate_per_s"] == 2.0


def test_a_relative_dataset_path_is_read_from_the_current_directory(scenario, tmp_path, monkeypatch):
    (tmp_path / "d.jsonl").write_text('{"input_tokens": 400, "output_tokens": 7}\n')
    monkeypatch.chdir(tmp_path)
    summary = _whatif(tmp_path, "--scenario", str(scenario), "--set", "workload.dataset=d.jsonl", "--stages", "2")
    row = summary["stages"][0]
    assert summary["scenario"]["workload"]["dataset"] == "d.jsonl"
    assert row["input_tokens"] == 400 * row["requests"] and row["output_tokens"] == 7 * row["requests"]


@pytest.mark.parametrize(("argv", "named"), [
    (["--set", "input.dist=lognorm"], "llm-loadgen whatif: input.dist (from --set): must be one of"),
    (["--set", "stages.warmup=3"], "stages.warmup (from --set): unknown key"),
    (["--stages", "1,x"], "stages.list (from --stages): must be comma-separated whole numbers"),
    (["--set", "workload.turns=3"], "workload.turns: is not predicted"),
    (["--set", "workload.dataset=missing.jsonl"], "--dataset: cannot be read"),
])
def test_bad_input_is_named_with_the_run_s_words(scenario, capsys, argv, named):
    assert cli.main(["whatif", PRESET, "--scenario", str(scenario), *argv]) == 2
    assert named in capsys.readouterr().err


def test_a_bad_field_in_the_file_is_named(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("output: {dist: uniform, min: 50}\n")
    assert cli.main(["whatif", PRESET, "--scenario", str(path)]) == 2
    err = capsys.readouterr().err
    assert "output.max" in err and "uniform" in err


def test_set_without_a_scenario_says_to_add_one(capsys):
    assert cli.main(["whatif", PRESET, "--set", "output.max=60"]) == 2
    assert "add --scenario FILE" in capsys.readouterr().err


def test_a_trace_is_one_rate_stage_whose_lines_arrive_at_their_times(tmp_path):
    """A timestamped dataset runs as one rate stage at the trace's mean rate (trace_scenario); each
    line arrives at its own time from the stage's start, the trace starting over one period later."""
    from loadgen.config import load_scenario
    from loadgen.engine_model.engine import EngineParams
    from loadgen.whatif.scenario import whatif_of
    from loadgen.whatif.virtual_sweep import run_sweep

    lines = [(0, 300, 4), (400, 900, 2), (1500, 100, 6)]  # (ms, input, output)
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps({"timestamp": t, "input_tokens": i, "output_tokens": o}) + "\n"
                            for t, i, o in lines))
    sc = load_scenario(None, {"workload.dataset": str(path), "stages.warmup_s": 0, "stages.duration_s": 8,
                              "stages.turnover": False})
    w, _ = whatif_of(sc)
    period = 1.5 + 1.5 / 2  # span + mean gap (loadgen.workload.trace)
    assert w.open_loop and w.loads == (pytest.approx(3 / period),)
    (rec,) = run_sweep(EngineParams(), list(w.loads), stages=w.stages, open_loop=True, workload=w.workload)
    assert len(rec.requests) >= 6
    by_time = {round(t / 1000, 6): (i, o) for t, i, o in lines}
    for timing in rec.requests:
        offset = round((timing.sent_s - 0.0) % period, 6)  # the stage starts at t = 0
        assert by_time[offset] == (timing.input_tokens, timing.tokens)


def test_requests_that_cannot_fit_the_preset_s_context_are_refused_as_the_run_refuses_them(scenario, capsys):
    """The preset's max_model_len is 32768: the start check's words, exit 2."""
    assert cli.main(["whatif", PRESET, "--scenario", str(scenario), "--set", "input.max=200000"]) == 2
    assert "the longest input + output the length distributions allow" in capsys.readouterr().err
    assert cli.main(["whatif", PRESET, "--input-tokens", "200000"]) == 2
    assert "exceeds the preset's max_model_len" in capsys.readouterr().err


def test_a_mix_of_models_is_predicted_per_model_as_the_run_draws_it(scenario, tmp_path):
    """model: a=0.7,b=0.3 in a what-if: each stage has the run's per-model rows, whose requests,
    errors and tokens add up to the stage's exactly, with the run's own seeded draws (70/30 within
    sampling error over the stage's requests); the engine times both models alike (the note)."""
    import math

    for replicas in ("1", "2"):  # two replicas: each one's parts merged into the stage's, models too
        summary = _whatif(tmp_path, "--scenario", str(scenario), "--set", "model=a=0.7,b=0.3", "--stages", "8",
                          "--set", "stages.duration_s=20", "--replicas", replicas)
        (row,) = summary["stages"]
        models = row["models"]
        assert list(models) == ["a", "b"]
        for key in ("requests", "error_count", "input_tokens", "output_tokens"):
            assert sum(m[key] for m in models.values()) == row[key], (replicas, key)
        n = row["requests"]
        assert n >= 100 and abs(models["a"]["requests"] - 0.7 * n) <= 3 * math.sqrt(n * 0.7 * 0.3)
        assert sum(m["output_tokens_per_s"] for m in models.values()) == pytest.approx(row["output_tokens_per_s"],
                                                                                       rel=0.01)
        assert any("mix of models is drawn per request" in note for note in summary["notes"])
