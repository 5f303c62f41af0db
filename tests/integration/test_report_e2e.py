"""Reports from real runs: two short sweeps on the simulator, their plots, HTML and comparison."""

from __future__ import annotations

import subprocess
import sys

import pytest

from loadgen.report.plots import build_run_figures
from loadgen.run_folder.summary_file import load_summary
from loadgen.sim.launch import running_sim
from tests.integration.test_report_chromium import CHROMIUM, render
from tests.support.runlocust import ROOT, run_dir, run_locust

pytestmark = pytest.mark.integration

RUN = ("--scenario", "config/smoke.yaml", "--stages", "1,2,4", "--warmup", "1", "--stage-duration", "3")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """The same sweep against a fast and a slow server (20 ms vs 40 ms per token)."""
    tmp = tmp_path_factory.mktemp("reports")
    dirs = []
    for name, itl in (("fast", "20"), ("slow", "40")):
        with running_sim("--preset", "fixed", "--ttft-ms", "100", "--itl-ms", itl) as sim:
            run = run_locust(sim.url, tmp / name, *RUN, plots=True)
        assert run.code == 0, run.stderr[-2000:]
        dirs.append(tmp / name)  # the results directory: report and compare take it for its newest run
    return dirs


def line(ax, label):
    (found,) = [ln for ln in ax.lines if ln.get_label() == label]
    return list(found.get_xdata()), list(found.get_ydata())


def test_run_writes_report_files_whose_plots_hold_the_stage_series(two_runs):
    fast = run_dir(two_runs[0])
    for name in ("summary.json", "stages.csv", "report.html", "throughput.png", "latency.png", "tradeoff.png"):
        assert (fast / name).stat().st_size > 0, name
    summary = load_summary(fast)
    stages = summary["stages"]
    figs = build_run_figures(summary)
    xs, ys = line(figs["throughput"].axes[0], "output tok/s")
    assert xs == [1, 2, 4]
    assert ys == pytest.approx([s["output_tokens_per_s"] for s in stages])
    # throughput rises with concurrency against a server whose per-stream speed is fixed
    assert ys[0] < ys[1] < ys[2]
    _, ttft_ms = line(figs["latency"].axes[0], "TTFT p50")
    assert ttft_ms == pytest.approx([s["ttft_p50_s"] * 1000 for s in stages])
    _, itl_ms = line(figs["latency"].axes[1], "ITL p50")
    assert itl_ms == pytest.approx([20.0] * 3, rel=0.05)  # the server's 20 ms per token


def test_report_html_of_a_real_run_renders_in_chromium(two_runs, tmp_path):
    if CHROMIUM is None:
        pytest.skip("chromium not installed: run scripts/ensure-chromium.sh")
    info, errors, png = render(run_dir(two_runs[0]) / "report.html", tmp_path / "profile")
    (tmp_path / "real-run.png").write_bytes(png)
    assert errors == [] and info["resources"] == []
    assert info["stageRows"] == 1 + 3
    assert [i["alt"] for i in info["images"]] == ["throughput", "latency", "tradeoff"]
    assert all(i["complete"] and i["w"] > 100 for i in info["images"])


def test_compare_two_real_runs(two_runs, tmp_path):
    out = tmp_path / "cmp"
    proc = subprocess.run([sys.executable, "-m", "loadgen.report", "compare", *map(str, two_runs), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    text = (out / "compare.txt").read_text()
    assert "fast" in text and "slow" in text
    assert (out / "compare.html").stat().st_size > 0
    # the slow server's ITL is about twice the fast one's in both summaries
    fast, slow = (load_summary(run_dir(d))["stages"][0]["itl_p50_s"] for d in two_runs)
    assert slow / fast == pytest.approx(2.0, rel=0.1)
