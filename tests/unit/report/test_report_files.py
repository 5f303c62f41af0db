"""write_results / load_summary: the results directory, atomic writes, failures that must not lose data."""

import copy
import json
import logging
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import loadgen.report.plots as plots
from loadgen.errors import ConfigError
from loadgen.report.files import write_results
from loadgen.run_folder.atomic import atomic_write_text
from loadgen.run_folder.summary_file import load_summary
from tests.support.summaries import recorded_summary

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


@pytest.fixture
def seeds():
    return recorded_summary("seeds_sweep")


def test_writes_every_file_and_summary_round_trips(tmp_path, seeds):
    written = write_results(tmp_path / "run", seeds)
    assert set(written) == {"summary", "stages_csv", "throughput", "latency", "tradeoff", "html"}
    names = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert names == [
        "latency.png",
        "report.html",
        "stages.csv",
        "summary.json",
        "throughput.png",
        "tradeoff.png",
    ]
    assert json.loads(written["summary"].read_text()) == seeds
    assert load_summary(tmp_path / "run") == seeds
    assert len(written["stages_csv"].read_text().strip().split("\n")) == 1 + len(seeds["stages"])


def test_non_finite_numbers_become_null_so_the_json_stays_valid(tmp_path, seeds):
    seeds["stages"][0]["ttft_p99_s"] = math.nan
    seeds["stages"][1]["output_tokens_per_s"] = math.inf
    write_results(tmp_path, seeds, plots=False)
    text = (tmp_path / "summary.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    back = json.loads(text)
    assert back["stages"][0]["ttft_p99_s"] is None and back["stages"][1]["output_tokens_per_s"] is None


def test_repeated_calls_last_one_wins(tmp_path, seeds):
    partial = copy.deepcopy(seeds)
    partial["stages"] = partial["stages"][:3]
    write_results(tmp_path, partial, plots=False, final=False)
    assert "Plots drawn at the end of the run" in (tmp_path / "report.html").read_text()
    assert not list(tmp_path.glob("*.png"))
    write_results(tmp_path, seeds)
    assert len(load_summary(tmp_path)["stages"]) == len(seeds["stages"])
    assert "data:image/png;base64," in (tmp_path / "report.html").read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


def test_a_run_without_plots_says_how_to_draw_them(tmp_path, seeds):
    """--no-plots (scenario ``plots: false``): the final report has no images and names the command
    that draws them, instead of promising them at the end of a run that has ended."""
    write_results(tmp_path, seeds, plots=False, final=True)
    html = (tmp_path / "report.html").read_text()
    assert not list(tmp_path.glob("*.png")) and "data:image/png" not in html
    assert "not drawn (--no-plots)" in html and "llm-loadgen report build" in html
    assert "drawn at the end of the run" not in html


def test_plot_failure_keeps_summary_csv_and_html(tmp_path, seeds, monkeypatch, caplog):
    def broken(_summary):
        raise RuntimeError("matplotlib exploded")

    monkeypatch.setattr(plots, "build_run_figures", broken)
    with caplog.at_level(logging.ERROR):
        written = write_results(tmp_path, seeds)
    assert set(written) == {"summary", "stages_csv", "html"}
    assert load_summary(tmp_path) == seeds
    assert "matplotlib exploded" in caplog.text and "summary.json and stages.csv are written" in caplog.text
    assert "Plots not available" in (tmp_path / "report.html").read_text()


def test_html_failure_keeps_summary_and_csv(tmp_path, seeds, monkeypatch, caplog):
    import loadgen.report.files as files

    monkeypatch.setattr(files, "render_report_html", lambda *a, **k: 1 / 0)
    with caplog.at_level(logging.ERROR):
        written = write_results(tmp_path, seeds, plots=False)
    assert set(written) == {"summary", "stages_csv"}
    assert (tmp_path / "stages.csv").is_file() and load_summary(tmp_path) == seeds
    assert "report.html failed" in caplog.text


def test_atomic_write_failure_keeps_previous_file_and_leaves_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "summary.json"
    atomic_write_text(target, "old complete content")

    def crash(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_text(target, "new content")
    assert target.read_text() == "old complete content"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


@pytest.mark.parametrize(
    "setup, expected",
    [
        (lambda d: None, "not found or not a directory"),
        (lambda d: d.mkdir(), "missing"),
        (lambda d: (d.mkdir(), (d / "summary.json").write_text('{"schema": 1, "stages": [')), "invalid JSON"),
        (lambda d: (d.mkdir(), (d / "summary.json").write_text('{"schema": 1}')), "no 'stages' list"),
        (
            lambda d: (d.mkdir(), (d / "summary.json").write_text('{"schema": 1, "stages": [3]}')),
            "no 'stages' list",
        ),
        (lambda d: (d.mkdir(), (d / "summary.json").write_text('{"schema": 7, "stages": []}')), "schema 7"),
    ],
)
def test_load_summary_errors_name_the_path_and_a_fix(tmp_path, setup, expected):
    run = tmp_path / "run"
    setup(run)
    with pytest.raises(ConfigError) as info:
        load_summary(run)
    message = str(info.value)
    assert expected in message
    assert str(run) in message
    assert "(" in message and "\n" not in message  # one line with a fix in parentheses


def test_import_and_plotless_write_do_not_load_matplotlib(tmp_path):
    """The load generator imports loadgen.report and writes results between stages; matplotlib
    (a second of CPU) must be loaded only when plots are drawn."""
    code = (
        "import json, sys\n"
        "from loadgen.report import write_results, format_stage_table, find_knee\n"
        f"s = json.load(open({str(FIXTURES / 'summary_seeds_sweep.json')!r}))\n"
        f"write_results({str(tmp_path)!r}, s, plots=False)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    assert (tmp_path / "report.html").is_file()
