"""Comparing results directories, and the command line (exit codes, messages)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.errors import EXIT_CONFIG, EXIT_OK
from loadgen.report.__main__ import main
from loadgen.report.compare import compare_figures, compare_rows, format_compare_table, load_runs, run_labels
from loadgen.report.table import ms, num

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
REPO = Path(__file__).resolve().parents[3]


def make_run(root: Path, name: str, fixture: str) -> Path:
    run = root / name
    run.mkdir(parents=True)
    shutil.copy(FIXTURES / f"summary_{fixture}.json", run / "summary.json")
    return run


@pytest.fixture
def two_runs(tmp_path):
    return [make_run(tmp_path, "sglang-run", "seeds_sweep"), make_run(tmp_path, "vllm-run", "vllm_sweep")]


def test_rows_are_the_union_of_concurrencies_with_gaps(two_runs):
    runs = load_runs(two_runs)
    rows = {r["concurrency"]: r for r in compare_rows(runs)}
    assert sorted(rows) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    seeds = {s["concurrency"]: s for s in runs[0][1]["stages"]}
    vllm = {s["concurrency"]: s for s in runs[1][1]["stages"]}
    assert rows[32]["output_tokens_per_s"] == [
        seeds[32]["output_tokens_per_s"],
        vllm[32]["output_tokens_per_s"],
    ]
    assert rows[2]["ttft_p50_s"] == [None, vllm[2]["ttft_p50_s"]]
    assert rows[512]["itl_p50_s"] == [seeds[512]["itl_p50_s"], None]


def test_text_table_values_and_ratios_to_first_run(two_runs):
    runs = load_runs(two_runs)
    text = format_compare_table(runs)
    lines = text.split("\n")
    # the two fixture runs were made against different servers: said first, then the legend
    assert lines[0] == ("warning: the runs differ in server: #1 http://10.0.0.12:30000 (sglang), "
                        "#2 http://10.0.0.13:8000 (vllm)")
    lines = lines[1:]
    assert lines[0] == "#1 = sglang-run" and lines[1] == "#2 = vllm-run"
    seeds = {s["concurrency"]: s for s in runs[0][1]["stages"]}
    vllm = {s["concurrency"]: s for s in runs[1][1]["stages"]}
    row256 = next(line for line in lines if line.split("|")[0].strip() == "256")
    tput, ttft, itl = (cell.split() for cell in row256.split("|")[1:])
    a, b = seeds[256]["output_tokens_per_s"], vllm[256]["output_tokens_per_s"]
    assert tput == [num(a), num(b), f"{b / a:.2f}x"]
    assert ttft[:2] == [ms(seeds[256]["ttft_p50_s"]), ms(vllm[256]["ttft_p50_s"])]
    assert ttft[2] == f"{vllm[256]['ttft_p50_s'] / seeds[256]['ttft_p50_s']:.2f}x"
    assert itl[2] == f"{vllm[256]['itl_p50_s'] / seeds[256]['itl_p50_s']:.2f}x"
    row512 = next(line for line in lines if line.split("|")[0].strip() == "512")
    assert row512.split("|")[1].split()[1:] == ["-", "-"]
    assert "#1 knee: C=256; guard stop: C=1024" in text
    assert "#2 knee: none; guard stop: none" in text


def test_overlaid_plot_has_one_labelled_line_per_run(two_runs):
    runs = load_runs(two_runs)
    figs = compare_figures(runs)
    lines = {line.get_label(): line for line in figs["compare_throughput"].axes[0].lines}
    assert set(lines) == {"sglang-run", "vllm-run"}
    assert list(lines["vllm-run"].get_xdata()) == [s["concurrency"] for s in runs[1][1]["stages"]]
    assert list(lines["sglang-run"].get_ydata()) == [s["output_tokens_per_s"] for s in runs[0][1]["stages"]]
    for ax in figs["compare_latency"].axes:
        assert [line.get_label() for line in ax.lines] == ["sglang-run", "vllm-run"]


def test_labels_fall_back_to_scenario_then_parent(tmp_path):
    a = make_run(tmp_path / "a", "run", "seeds_sweep")
    b = make_run(tmp_path / "b", "run", "vllm_sweep")
    summaries = [json.loads((d / "summary.json").read_text()) for d in (a, b)]
    assert run_labels([a, b], summaries) == ["seeds-sweep", "vllm-sweep <b>&co</b>"]
    summaries[1]["scenario"]["name"] = "seeds-sweep"
    assert run_labels([a, b], summaries) == ["a/run", "b/run"]


def test_cli_build_rebuilds_report_without_touching_summary(tmp_path, capsys):
    run = make_run(tmp_path, "run", "seeds_sweep")
    before = (run / "summary.json").read_bytes()
    assert main(["build", str(run)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "knee: C=256" in out and "wrote" in out
    for name in ("report.html", "stages.csv", "throughput.png", "latency.png", "tradeoff.png"):
        assert (run / name).is_file(), name
    assert (run / "summary.json").read_bytes() == before


def test_cli_compare_writes_text_plots_html(two_runs, tmp_path, capsys):
    out_dir = tmp_path / "cmp"
    assert main(["compare", *map(str, two_runs), "--out", str(out_dir)]) == EXIT_OK
    printed = capsys.readouterr().out
    assert "#2 = vllm-run" in printed
    assert sorted(p.name for p in out_dir.iterdir()) == [
        "compare.html",
        "compare.txt",
        "compare_latency.png",
        "compare_throughput.png",
    ]
    html = (out_dir / "compare.html").read_text()
    assert html.count("data:image/png;base64,") == 2 and "vllm-sweep &lt;b&gt;" in html
    text = (out_dir / "compare.txt").read_text()
    assert text.startswith("warning: the runs differ in server:") and "\n#1 = sglang-run\n" in text
    assert "warning: the runs differ in server" in html


@pytest.mark.parametrize(
    "argv_of, needle",
    [
        (lambda t: ["build", str(t / "nope")], "not found"),
        (lambda t: ["build", str(t / "bad")], "invalid JSON"),
        (lambda t: ["compare", str(t / "good"), str(t / "nope")], "not found"),
        (lambda t: ["compare", str(t / "good")], "at least two"),
        (lambda t: ["compare", str(t / "good"), str(t / "good")], "#1 and #2 are the same run"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(tmp_path, capsys, argv_of, needle):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "summary.json").write_text("{not json")
    make_run(tmp_path, "good", "seeds_sweep")
    assert main(argv_of(tmp_path)) == EXIT_CONFIG
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.split("\n")) == 1
    assert err.startswith("report: ")
    if "nope" in " ".join(argv_of(tmp_path)):
        assert str(tmp_path / "nope") in err


def test_python_dash_m_entry_point(tmp_path):
    ok = subprocess.run(
        [sys.executable, "-m", "loadgen.report", "build", str(make_run(tmp_path, "r", "vllm_sweep"))],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert "knee: none found" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "loadgen.report", "build", str(tmp_path / "missing")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == EXIT_CONFIG
    assert str(tmp_path / "missing") in bad.stderr and "Traceback" not in bad.stderr


def test_clock_columns_appear_only_when_a_run_has_a_breakdown(two_runs):
    from loadgen.report.compare import metrics_table_html

    runs = load_runs(two_runs)
    assert "server_ttft_mean_s" not in compare_rows(runs)[0]  # as before: no breakdown in either run
    label, summary = runs[1]
    stages = [dict(s) for s in summary["stages"]]
    stages[0]["breakdown"] = {"ttft": {"server_mean_s": 0.2, "queue_mean_s": 0.05, "network_client_mean_s": 0.01}}
    runs[1] = (label, {**summary, "stages": stages})
    row = next(r for r in compare_rows(runs) if r["concurrency"] == stages[0]["concurrency"])
    assert row["server_ttft_mean_s"] == [None, 0.2] and row["server_queue_mean_s"] == [None, 0.05]
    assert row["network_client_itl_mean_s"] == [None, None]
    html = metrics_table_html(runs)
    assert "Server queue mean (ms)" in html and '<td class="n">50.0</td>' in html
