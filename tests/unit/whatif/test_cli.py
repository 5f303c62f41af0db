"""``llm-loadgen calibrate`` and ``llm-loadgen whatif``: loadgen.whatif's parser under the command,
end to end on a tiny calibration (a run the engine itself produced), with the fit plot."""

from __future__ import annotations

import json

import pytest

from loadgen import cli
from loadgen.cli_help import format_help
from loadgen.sim.config import load
from loadgen.whatif.summary import WhatIf, predict
from loadgen.whatif.virtual_sweep import stage_rules

PLAN = stage_rules(ramp_s=0, warmup_s=1, duration_s=3, max_warmup_s=10, max_window_s=20)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A finished run folder: summary.json of a sweep of a known engine at C = 1, 4, 16."""
    measured = predict(load("qwen35-397b-8gpu"), WhatIf(500, 100, (1, 4, 16), stages=PLAN))
    measured["scenario"]["stages"] = {"warmup_s": 1, "duration_s": 3, "max_warmup_s": 10, "max_window_s": 20}
    run = tmp_path_factory.mktemp("run")
    (run / "summary.json").write_text(json.dumps(measured))
    return run


def test_calibrate_then_whatif_through_llm_loadgen(run_dir, tmp_path, capsys):
    preset = tmp_path / "mine.yaml"
    assert cli.main(["calibrate", str(run_dir), "-o", str(preset)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"Calibrated by llm-loadgen calibrate from {run_dir}")
    for suffix in (".fit.json", ".fit.png", ".fit.html"):
        assert preset.with_suffix(suffix).is_file(), suffix
    assert 'alt="calibration_fit"' in preset.with_suffix(".fit.html").read_text()
    out = tmp_path / "whatif"
    assert cli.main(["whatif", str(preset), "--input-tokens", "1000", "--output-tokens", "100", "--stages", "1,8",
                     "--warmup-s", "1", "--duration-s", "3", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "PREDICTED (not measured)" in printed and "with the calibration fit plot" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["predicted"] and summary["calibration"]["run"] == str(run_dir)
    assert summary["calibration"]["file"] == str(preset.with_suffix(".fit.json"))
    assert (out / "calibration_fit.png").read_bytes().startswith(b"\x89PNG")
    html = (out / "report.html").read_text()
    assert 'alt="calibration_fit"' in html and 'id="predicted"' in html
    assert f"calibrated to the run {run_dir}" in html


def test_the_subcommands_use_predict_s_parser_under_llm_loadgen_s_name(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["whatif", "--help"])
    assert stop.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: llm-loadgen whatif") and "--kv-tokens" in text and "--replicas" in text
    assert cli.main(["whatif", "slo-linear", "--slo", "ttft=2"]) == 2
    assert "llm-loadgen whatif: slo.ttft (from --slo): unknown key" in capsys.readouterr().err  # the run's error


def test_whatif_slo_takes_the_run_s_percentile_limits(capsys):
    """--slo goes through the run's parser: a percentile limit alone judges each stage's p99 TTFT."""
    assert cli.main(["whatif", "slo-linear", "--stages", "1,64", "--input-tokens", "100", "--output-tokens", "20",
                     "--warmup-s", "1", "--duration-s", "3", "--slo", "ttft_p99_s=10"]) == 0
    out = capsys.readouterr().out
    assert "SLO: max concurrency C=64 (every stage passed ttft_p99_s <= 10" in out
    assert cli.main(["whatif", "slo-linear", "--stages", "1,64", "--input-tokens", "100", "--output-tokens", "20",
                     "--warmup-s", "1", "--duration-s", "3", "--slo", "ttft_p99_s=0.000001"]) == 0
    assert "slo_fail" in capsys.readouterr().out


def test_calibrate_names_a_folder_without_a_run(tmp_path, capsys):
    assert cli.main(["calibrate", str(tmp_path), "-o", str(tmp_path / "x.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llm-loadgen calibrate: summary.json: missing") and not (tmp_path / "x.yaml").exists()


def test_help_lists_both():
    text = format_help(200)
    assert "llm-loadgen calibrate RUN_DIR... -o PRESET" in text and "llm-loadgen whatif PRESET" in text
    assert "calibrate" in cli.COMMANDS and "whatif" in cli.COMMANDS
