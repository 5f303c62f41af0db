"""The built wheel, installed into a fresh venv outside the clone, run from an empty directory.

Build: the package's sources (pyproject.toml, loadgen/, shapes/ and the folders loadgen/ links to:
config/, grafana/, docs/) are copied under tmp_path and ``pip wheel --no-deps`` builds there, so
the clone gets no build/ or .egg-info. The venv has no pip and no dependencies of its own: its
site-packages gets the wheel (``pip --python VENV install --no-deps``) and a .pth line naming the
test interpreter's site-packages, so Locust, gevent, numpy... are the ones .venv has (no download,
the same versions) while ``loadgen`` can only come from the wheel (a .pth line adds a directory
but runs none of the .pth files in it, so .venv's editable install of the clone stays off). A test
checks where loadgen was imported from.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from loadgen.run_folder.folders import resolve_run_dir
from tests.support.merge_check import assert_exact_merge, merged, worker_ledgers
from tests.unit.faces.test_cli import registered_flags
from tests.unit.faces.test_cli_docs import code_pointers

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "locustfile.py", "loadgen", "shapes", "config", "grafana", "docs")
SMOKE = ("--scenario", "smoke", "--output-tokens", "20", "--warmup", "1", "--stage-duration", "2",
         "--loglevel", "WARNING")
CARRIED = ("loadgen/locustfile.py", "loadgen/scenarios/smoke.yaml", "loadgen/scenarios/default.yaml",
           "loadgen/scenarios/datasets/lengths-mix.jsonl", "loadgen/sim/presets/fixed.yaml",
           "loadgen/grafana/dashboards/llm-loadgen.json", "loadgen/grafana/prometheus.yml",
           "loadgen/grafana/provisioning/datasources/prometheus.yml", "loadgen/docs/cli.md",
           # the pages the tool's messages point at (docs/workloads.md 'Datasets', ...)
           "loadgen/docs/workloads.md", "loadgen/docs/distributed.md", "loadgen/docs/benchmarks.md", "shapes/sweep.py")


def run(cmd: list, cwd: Path, timeout_s: float = 120, **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout_s,
                          env=env, **kwargs)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path, dict]:
    """(the venv's bin/, an empty directory, {"wheel": the built wheel}); each step is bounded by
    its subprocess timeout, not timed (speed targets live in benchmarks)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build"))
        else:
            shutil.copy2(path, src / name)
    built = run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp / "dist", src], tmp, 240)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("llm_loadgen-*.whl")

    venv = tmp / "venv"
    made = run([sys.executable, "-m", "venv", "--without-pip", venv], tmp)
    assert made.returncode == 0, made.stderr
    py = venv / "bin" / "python"
    inst = run([sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", wheel], tmp)
    assert inst.returncode == 0, inst.stderr[-3000:]
    purelib = run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], tmp).stdout.strip()
    (Path(purelib) / "_llm_loadgen_test_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    empty = tmp / "empty"
    empty.mkdir()
    return venv / "bin", empty, {"wheel": wheel}


def test_the_wheel_carries_the_locustfile_presets_dashboard_and_docs(installed):
    _, _, info = installed
    names = set(zipfile.ZipFile(info["wheel"]).namelist())
    missing = [name for name in CARRIED if name not in names]
    assert not missing, missing
    # every figure a page shows (bench outputs under docs/figures/) travels with the page
    shown = {f"loadgen/docs/{m}" for page in (ROOT / "docs").glob("*.md")
             for m in re.findall(r"\]\((figures/[^)\s]+)\)", page.read_text())}
    assert shown and not shown - names, sorted(shown - names)
    # the tools only tests and benchmarks use stay in the clone (tests/support/raw_client.py)
    assert not [n for n in names if n.startswith("tests/") or n.endswith("raw_client.py")]
    assert "loadgen/engine_model/engine.py" in names and "loadgen/slo/search.py" in names
    entry = zipfile.ZipFile(info["wheel"]).read(next(n for n in names if n.endswith("entry_points.txt")))
    assert "llm-loadgen = loadgen.cli:main" in entry.decode()


def test_every_page_a_message_points_at_is_read_from_the_wheel_by_llm_loadgen_docs(installed):
    """A user of the wheel has no docs/ folder: ``llm-loadgen docs PAGE 'Section'`` reads the page the
    package carries (tests/unit/faces/test_cli_docs.py checks every pointer's section in the clone)."""
    bin_dir, empty, info = installed
    names = set(zipfile.ZipFile(info["wheel"]).namelist())
    pointed = {page for page, _ in code_pointers()}
    assert pointed and not [p for p in pointed if f"loadgen/{p}" not in names], pointed
    out = run([bin_dir / "llm-loadgen", "docs", "docs/slo.md", "Percentile limits"], empty)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "## Percentile limits" and not [ln for ln in lines[1:] if ln.startswith("## ")], lines
    where = run([bin_dir / "llm-loadgen", "docs", "slo", "--path"], empty)
    path = Path(where.stdout.strip())
    assert where.returncode == 0 and path.is_file() and str(bin_dir.parent) in str(path), where


def test_loadgen_comes_from_the_wheel_not_the_clone(installed):
    bin_dir, empty, _ = installed
    out = run([bin_dir / "python", "-c", "import loadgen, shapes, locust; print(loadgen.__file__); "
               "print(shapes.__file__); print(locust.__version__)"], empty)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split()
    assert all(str(bin_dir.parent) in line and str(ROOT) not in line for line in lines[:2]), lines


def test_help_lists_every_option_from_an_empty_directory(installed):
    bin_dir, empty, _ = installed
    out = run([bin_dir / "llm-loadgen", "--help"], empty)
    assert out.returncode == 0, out.stderr
    missing = [flag for flag in registered_flags() if f"\n  {flag}" not in out.stdout]
    assert not missing, missing
    assert "--processes" in out.stdout and "(default: 1000) [input_tokens]" in " ".join(out.stdout.split())
    docs = " ".join(out.stdout.split()).split("Reference: ")[1].split()[0].rstrip(".")
    assert Path(docs).is_file() and str(bin_dir.parent) in docs  # the page --help names is installed
    listed = run([bin_dir / "llm-loadgen", "scenarios"], empty)
    assert listed.returncode == 0 and "smoke" in listed.stdout and "demo" in listed.stdout
    kit = run([bin_dir / "llm-loadgen", "grafana", "g"], empty)
    assert kit.returncode == 0, kit.stderr
    assert json.loads((empty / "g" / "dashboards" / "llm-loadgen.json").read_text())["title"]
    assert (empty / "g" / "prometheus.yml").read_text() == (ROOT / "grafana" / "prometheus.yml").read_text()


@pytest.fixture(scope="module")
def sim_url(installed):
    bin_dir, empty, _ = installed
    proc = subprocess.Popen([str(bin_dir / "llm-loadgen"), "sim", "--preset", "fixed", "--ttft-ms", "20",
                             "--itl-ms", "5", "--port", "0"], cwd=empty, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("SIM_LISTENING "), line
        yield line.split()[1]
    finally:
        proc.terminate()
        proc.wait(10)


def summary_of(results: Path) -> dict:
    return json.loads((resolve_run_dir(results) / "summary.json").read_text())


def test_a_smoke_run_by_preset_name_writes_its_run_folder(installed, sim_url):
    bin_dir, empty, _ = installed
    out = run([bin_dir / "llm-loadgen", "--host", sim_url, *SMOKE, "--results-dir", "res",
               "--label", "wheel", "--metadata", "where=venv"], empty)
    assert out.returncode == 0, out.stderr[-3000:]
    folder = resolve_run_dir(empty / "res")
    assert folder.name.endswith("_smoke_completions-64-20_c1-2_wheel")
    for name in ("summary.json", "stages.csv", "report.html"):
        assert (folder / name).is_file(), name
    s = summary_of(empty / "res")
    assert s["scenario"]["name"] == "smoke" and [r["concurrency"] for r in s["stages"]] == [1, 2]
    assert s["run"]["label"] == "wheel" and s["run"]["metadata"] == {"where": "venv"}
    assert all(r["requests"] > 0 and r["error_count"] == 0 for r in s["stages"])


def test_the_same_run_on_two_processes_merges_exactly(installed, sim_url):
    bin_dir, empty, _ = installed
    out = run([bin_dir / "llm-loadgen", "--host", sim_url, *SMOKE, "--stages", "2,4", "--processes", "2",
               "--results-dir", "res2"], empty)
    assert out.returncode == 0, out.stderr[-3000:]
    s = summary_of(empty / "res2")
    assert s["run"]["workers"] == 2 and [r["users"] for r in s["stages"]] == [2, 4]
    parts = worker_ledgers(empty / "res2")
    assert len(parts) == 2 and all(p.requests_ok > 0 for p in parts)
    assert_exact_merge(s, merged(parts))


def test_report_build_and_compare_on_those_runs(installed):
    """After the two runs above (file order): the report subcommand of the installed command."""
    bin_dir, empty, _ = installed
    built = run([bin_dir / "llm-loadgen", "report", "build", "res"], empty)
    assert built.returncode == 0, built.stderr[-2000:]
    assert "wrote " in built.stdout and (resolve_run_dir(empty / "res") / "report.html").is_file()
    compared = run([bin_dir / "llm-loadgen", "report", "compare", "res", "res2", "--out", "cmp"], empty)
    assert compared.returncode == 0, compared.stderr[-2000:]
    assert "(label wheel; where=venv)" in compared.stdout and (empty / "cmp" / "compare.html").is_file()
