"""Run folders: every run in its own folder, a `latest` link, report/compare take a folder or the parent."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.config import load_scenario
from loadgen.errors import ConfigError
from loadgen.report.compare import differences, load_runs
from loadgen.run_folder.atomic import atomic_write_text
from loadgen.run_folder.folders import (
    FAILED,
    LATEST,
    create_run_dir,
    folder_name,
    resolve_run_dir,
    run_name,
    settle_run,
)
from loadgen.run_folder.summary_file import load_summary

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures"
T0 = 1_764_582_000.0  # 2025-12-01 09:40:00 UTC


def test_run_name_is_the_effective_scenario_after_overrides():
    assert run_name(load_scenario(None)) == "default_completions-1000-1000_c1-1024"
    over = load_scenario(None, {"input_tokens": 200, "output_tokens": 200, "stages.list": [4, 16, 64]})
    assert run_name(over) == "default_completions-200-200_c4-64"
    chat = load_scenario(ROOT / "config" / "chat.yaml", {"stages.max": 8})
    assert run_name(chat) == "chat_chat-1000-1000_c1-8"
    rates = load_scenario(None, {"rate.list": [0.5, 2, 8]})
    assert run_name(rates) == "default_completions-1000-1000_r0.5-8"


def test_folder_name_is_the_utc_start_and_a_safe_name():
    assert folder_name(T0, "default_completions-1000-1000_c1-1024") == \
        "20251201-094000_default_completions-1000-1000_c1-1024"
    assert folder_name(T0, "my run/ü:*") == "20251201-094000_my-run-"[:-1]


def test_runs_in_the_same_second_get_their_own_folders_and_latest_follows_measured_runs(tmp_path):
    first = create_run_dir(tmp_path, T0, "a")
    atomic_write_text(first / "summary.json", "first")
    assert not (tmp_path / LATEST).exists()  # nothing measured yet
    settle_run(first, measured=True, reason=None)
    second = create_run_dir(tmp_path, T0, "a")
    assert (first.name, second.name) == ("20251201-094000_a", "20251201-094000_a-2")
    assert (first / "summary.json").read_text() == "first"  # nothing of the earlier run replaced
    assert os.readlink(tmp_path / LATEST) == first.name  # a run that has not measured does not move it
    settle_run(second, measured=False, reason=None)  # still running: neither latest nor failed
    assert os.readlink(tmp_path / LATEST) == first.name and not (second / FAILED).exists()
    settle_run(second, measured=True, reason=None)
    assert (tmp_path / LATEST).is_symlink() and os.readlink(tmp_path / LATEST) == second.name


def test_a_run_that_ends_without_a_measured_stage_is_marked_failed_and_latest_stays(tmp_path):
    good = create_run_dir(tmp_path, T0, "a")
    settle_run(good, measured=True, reason=None)
    bad = create_run_dir(tmp_path, T0 + 60, "a")
    settle_run(bad, measured=False, reason="error")
    assert os.readlink(tmp_path / LATEST) == good.name
    assert (bad / FAILED).read_text().startswith("error: this run measured no stage")


def _run(root: Path, name: str, fixture: str = "seeds_sweep") -> Path:
    (root / name).mkdir(parents=True)
    shutil.copy(FIXTURES / f"summary_{fixture}.json", root / name / "summary.json")
    return root / name


def test_a_parent_resolves_to_its_newest_run(tmp_path):
    old, new = _run(tmp_path, "20251201-094000_x"), _run(tmp_path, "20251201-095000_x")
    (tmp_path / "20251201-096000_x").mkdir()  # a run that wrote nothing yet is not a run
    assert resolve_run_dir(old) == old  # a run folder is itself
    assert resolve_run_dir(tmp_path) == new  # no latest link: newest by name (= start time)
    (tmp_path / LATEST).symlink_to(old.name)
    assert resolve_run_dir(tmp_path) == old.resolve()  # latest wins when it points at a run
    (tmp_path / LATEST).unlink()
    (tmp_path / LATEST).symlink_to("gone")
    assert resolve_run_dir(tmp_path) == new
    # a summary.json at the results directory's root, from a version before run folders, is stale
    shutil.copy(FIXTURES / "summary_seeds_sweep.json", tmp_path / "summary.json")
    assert resolve_run_dir(tmp_path) == new
    empty = tmp_path / "empty"
    empty.mkdir()
    assert resolve_run_dir(empty) == empty
    with pytest.raises(ConfigError, match="summary.json"):
        load_summary(resolve_run_dir(empty))


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_result_files_get_the_mode_open_would_give(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        path = atomic_write_text(tmp_path / "f.txt", "x")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == mode


def test_compare_says_what_differs_between_runs(tmp_path):
    a, b = _run(tmp_path, "a"), _run(tmp_path, "b")
    for run, tokens, model in ((a, 1000, None), (b, 200, "other-model")):
        s = json.loads((run / "summary.json").read_text())
        s["scenario"].update(endpoint="completions", input_tokens=tokens, output_tokens=tokens)
        s["run"]["model"] = model or s["run"]["model"]
        (run / "summary.json").write_text(json.dumps(s))
    runs = load_runs([a, b])
    assert differences(runs) == [
        "warning: the runs differ in scenario: #1 completions 1000/1000 tokens, #2 completions 200/200 tokens",
        f"warning: the runs differ in model: #1 {runs[0][1]['run']['model']}, #2 other-model",
    ]
    assert differences([runs[0], runs[0]]) == []


def test_compare_refuses_to_compare_a_run_with_itself_and_names_the_run_folders(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    older, newest = _run(tmp_path / "results", "20251201-094000_x"), _run(tmp_path / "results", "20251201-095000_x")
    (tmp_path / "results" / LATEST).symlink_to(newest.name)
    fix = "name the two run folders to compare, e.g. compare results/20251201-094000_x results/20251201-095000_x"
    for pair in (["results", "results"], ["results", "results/latest"], ["results", str(newest)],
                 [str(newest), "results/latest"]):
        with pytest.raises(ConfigError) as err:
            load_runs(pair)
        assert str(err.value) == (f"compare: #1 and #2 are the same run, {newest} (a results directory stands "
                                  f"for its newest run), got {pair!r} ({fix})")
    with pytest.raises(ConfigError, match=r"#2 and #3 are the same run"):
        load_runs([older, "results", newest])
    assert [label for label, _ in load_runs([older, "results"])] == [older.name, "results"]  # two runs: fine
    alone = _run(tmp_path / "other", "20251201-094000_y")
    with pytest.raises(ConfigError, match="holds no other run: pass two different run folders"):
        load_runs(["other", alone])


def test_report_build_and_compare_take_the_parent_and_survive_a_closed_pipe(tmp_path):
    _run(tmp_path / "r1", "20251201-094000_x", "vllm_sweep")
    newest = _run(tmp_path / "r1", "20251201-095000_x")
    other = _run(tmp_path / "r2", "20251201-094500_y", "vllm_sweep")
    done = subprocess.run([sys.executable, "-m", "loadgen.report", "build", str(tmp_path / "r1")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (newest / "report.html").is_file() and not (tmp_path / "r1" / "20251201-094000_x" / "report.html").exists()
    # `compare A B | head -3`: the reader leaves after three lines
    out = tmp_path / "cmp"
    proc = subprocess.Popen([sys.executable, "-m", "loadgen.report", "compare", str(tmp_path / "r1"),
                             str(tmp_path / "r2"), "--out", str(out)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    head = [proc.stdout.readline().rstrip("\n") for _ in range(3)]
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 0 and "Traceback" not in err and "BrokenPipe" not in err, err
    # each parent stands for its newest run (r1's is the SGLang one), labelled by the name given
    assert head[0] == ("warning: the runs differ in server: #1 http://10.0.0.12:30000 (sglang), "
                       "#2 http://10.0.0.13:8000 (vllm)")
    assert head[1:] == ["#1 = r1", "#2 = r2"] and other.is_dir()
    assert (out / "compare.html").is_file()  # written after the table whose reader had gone


def test_a_summary_of_an_older_version_is_read_under_the_current_key_names(tmp_path):
    """A stage's ``breakdown.verdict`` (before the word meant only a yes/no on a stage) is read as
    ``breakdown.diagnosis``; a summary that has the new key keeps it."""
    from loadgen.run_folder.summary_file import SCHEMA

    old = {"schema": SCHEMA, "stages": [{"index": 0, "breakdown": {"verdict": "TTFT grew: queue"}},
                                        {"index": 1, "breakdown": {"diagnosis": "new", "verdict": "old"}},
                                        {"index": 2}]}
    (tmp_path / "summary.json").write_text(json.dumps(old))
    stages = load_summary(tmp_path)["stages"]
    assert stages[0]["breakdown"] == {"diagnosis": "TTFT grew: queue"}
    assert stages[1]["breakdown"] == {"diagnosis": "new", "verdict": "old"}
    assert stages[2] == {"index": 2}
