"""The run's console lines in order (pure Session driving, no sockets): notices about the next stage
after the earlier stage's row, and the headless progress line."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from locust.env import Environment

from loadgen import errors
from loadgen.config import load_scenario
from loadgen.fleet.distributed import Fleet
from loadgen.phases import Phase
from loadgen.run.console import PROGRESS_EVERY_S, progress_line
from loadgen.run.kv_guard import decide
from loadgen.run.plan import GuardDecided, PhaseStarted, StageFinal, SweepDone, WindowClosed, WindowOpened
from loadgen.run.runtime import Runtime
from loadgen.run.session import Session
from loadgen.stats.stage_stats import StageStats
from tests.integration.test_webui import run_request
from tests.support.users import Idle

ROOT = Path(__file__).resolve().parents[3]



@pytest.fixture
def session(tmp_path):
    env = Environment(user_classes=[Idle], host="http://127.0.0.1:9",
                      parsed_options=SimpleNamespace(headless=True))
    rt = Runtime(env, load_scenario(ROOT / "config" / "smoke.yaml", {"results_dir": str(tmp_path)}))
    env.llm = rt
    return Session(rt, Fleet(rt))


def lines(capsys) -> list[str]:
    return [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]


def test_the_next_stages_ramp_and_a_guard_refusal_print_after_the_earlier_row(session, capsys):
    s, rt = session, session.rt
    s.on_event(PhaseStarted(0, Phase.RAMP, 1), 0.0)
    s.on_event(PhaseStarted(0, Phase.MEASURE, 1), 1.0)
    s.on_event(WindowOpened(0, 1.0), 1.0)
    run_request(rt, 0, 1.0, 0.1, 5, window_stage=0)
    s.on_event(PhaseStarted(0, Phase.CLOSING, 1), 5.0)
    s.on_event(WindowClosed(0, 5.0, 1), 5.0)
    # stage 0's last request still runs: the next stage's notices wait for its row
    s.on_event(GuardDecided(1, 2, decide(2, 100, 64, 32, 0.0, "abort")), 5.0)
    s.on_event(PhaseStarted(1, Phase.RAMP, 2), 5.0)
    out = lines(capsys)
    assert out == ["llm-loadgen: stage 0 C=1: ramp"]
    s.on_event(StageFinal(0, forced=False), 6.0)
    out = lines(capsys)
    assert out[2].split()[0] == "1"  # the row (after the two header lines)
    assert out[3].startswith("llm-loadgen: client/server time breakdown off: ")  # no server watch here
    assert out[4].startswith("llm-loadgen: guard: stage concurrency 2") and "refusing it" in out[4]
    assert out[5] == "llm-loadgen: stage 1 C=2: ramp"


def test_progress_line_every_30_s_of_a_long_phase_with_the_window_so_far(session, capsys):
    s, rt = session, session.rt
    s.on_event(PhaseStarted(0, Phase.RAMP, 4), 0.0)
    s.on_event(PhaseStarted(0, Phase.MEASURE, 4), 2.0)
    s.on_event(WindowOpened(0, 2.0), 2.0)
    lines(capsys)
    s.progress(2.0 + PROGRESS_EVERY_S - 1)
    assert lines(capsys) == []  # a phase shorter than the period prints nothing
    for i in range(3):
        run_request(rt, 0, 3.0 + i, 0.1, 10, window_stage=0)
    for _ in range(4):  # the users' next requests, running now
        rt.request_started(0)
    s.progress(2.0 + PROGRESS_EVERY_S)
    (line,) = lines(capsys)
    assert line == "llm-loadgen: stage 0 C=4: measure 30 s, 4 in flight, 3 ok, 0 errors, 1 out tok/s so far"
    s.progress(2.0 + PROGRESS_EVERY_S + 10)
    assert lines(capsys) == []  # not again before another period
    rt.environment.parsed_options.headless = False  # the web UI has its tabs
    s.progress(2.0 + 3 * PROGRESS_EVERY_S)
    assert lines(capsys) == []


def test_progress_early_in_a_window_says_what_runs_not_zero_requests(session, capsys):
    """Users in step with long requests: a period into the window none has finished yet, all run."""
    s, rt = session, session.rt
    s.on_event(PhaseStarted(0, Phase.RAMP, 8), 0.0)
    s.on_event(PhaseStarted(0, Phase.MEASURE, 8), 1.0)
    s.on_event(WindowOpened(0, 1.0), 1.0)
    for _ in range(8):
        rt.request_started(None)  # sent in the warmup, still streaming
    rt.collector.add_window_tokens(0, 1200)
    lines(capsys)
    s.progress(1.0 + PROGRESS_EVERY_S)
    assert lines(capsys) == ["llm-loadgen: stage 0 C=8: measure 30 s, 8 in flight, none finished yet, "
                             "40 out tok/s so far"]


def test_a_rate_stage_is_named_by_its_rate_in_the_ramp_and_progress_lines(session, capsys, tmp_path):
    s, rt = session, session.rt
    rt.scenario = load_scenario(ROOT / "config" / "smoke.yaml", {"results_dir": str(tmp_path), "rate.list": [0.5, 8.0]})
    s.on_event(PhaseStarted(0, Phase.RAMP, 0.5), 0.0)
    s.on_event(PhaseStarted(0, Phase.MEASURE, 0.5), 1.0)
    s.on_event(WindowOpened(0, 1.0), 1.0)
    for _ in range(3):
        rt.request_started(0)
    s.progress(1.0 + PROGRESS_EVERY_S)
    assert lines(capsys) == ["llm-loadgen: stage 0 0.5 req/s over 1 process(es): ramp",
                             "llm-loadgen: stage 0 0.5 req/s: measure 30 s, 3 in flight, none finished yet, "
                             "0 out tok/s so far"]


def _stats(ok: int = 0, failed: int = 0, tokens: int = 0) -> StageStats:
    stats = StageStats()
    stats.requests_ok, stats.window_output_tokens = ok, tokens
    if failed:
        stats.errors[errors.READ_TIMEOUT] = failed
    return stats


@pytest.mark.parametrize("kind,inflight,stats,window_s,expected", [
    (Phase.MEASURE, 64, _stats(tokens=0), 30.0, "measure 30 s, 64 in flight, none finished yet, 0 out tok/s so far"),
    (Phase.MEASURE, 64, _stats(ok=120, failed=2, tokens=90_000), 60.0,
     "measure 30 s, 64 in flight, 120 ok, 2 errors, 1,500 out tok/s so far"),
    (Phase.MEASURE, 3, _stats(failed=5), 30.0, "measure 30 s, 3 in flight, 0 ok, 5 errors, 0 out tok/s so far"),
    (Phase.WARMUP, 64, None, None, "warmup 30 s, 64 in flight"),
    (Phase.CLOSING, 12, None, None, "closing 30 s, 12 in flight"),  # what the drain waits for
    (Phase.RAMP, None, None, None, "ramp 30 s"),
])
def test_progress_line_formatting(kind, inflight, stats, window_s, expected):
    line = progress_line(2, "C=64", kind, 30.4, inflight, stats, window_s)
    assert line == "llm-loadgen: stage 2 C=64: " + expected
    assert len(line) <= 110  # one short console line


def test_the_web_uis_stop_button_finishes_the_run_and_a_stage_cut_in_warmup_is_not_a_row(session, tmp_path, capsys):
    from loadgen.locust_face.webui import llm_view

    s, rt = session, session.rt
    s.started, s.run_dir = True, tmp_path / "run"
    s.run_dir.mkdir()
    s.on_event(PhaseStarted(0, Phase.RAMP, 1), 0.0)
    s.on_event(PhaseStarted(0, Phase.MEASURE, 1), 1.0)
    s.on_event(WindowOpened(0, 1.0), 1.0)
    run_request(rt, 0, 1.0, 0.1, 5, window_stage=0)
    s.on_event(PhaseStarted(0, Phase.CLOSING, 1), 5.0)
    s.on_event(WindowClosed(0, 5.0, 1), 5.0)  # its requests are all done: nothing is cut
    s.on_event(PhaseStarted(1, Phase.RAMP, 2), 5.0)
    s.on_event(PhaseStarted(1, Phase.WARMUP, 2), 6.0)
    s.on_runner_stopped()  # Stop pressed during stage 1's warmup
    summary = json.loads((s.run_dir / "summary.json").read_text())
    assert summary["run"]["stop_reason"] == "interrupted" and summary["run"]["exit_code"] == 130
    assert summary["run"]["ended_at"] is not None
    (row,) = summary["stages"]
    assert row["index"] == 0 and row["flags"] == [] and "unfinished_requests" not in row
    view = llm_view(s, 7.0)
    assert [(st["index"], st["status"]) for st in view["stages"]] == [(0, "done"), (1, "stopped, not measured")]
    assert view["phase"]["kind"] == Phase.DONE
    assert any("interrupted; results in" in ln for ln in lines(capsys))


def test_the_last_line_says_why_the_run_stopped_in_words(session, tmp_path, capsys):
    s = session
    s.started, s.run_dir = True, tmp_path / "run"
    s.run_dir.mkdir()
    s.on_event(SweepDone("guard_abort"), 0.0)
    s.on_quitting()
    last = lines(capsys)[-1]
    assert last == f"llm-loadgen: stopped by the KV guard (the next stage does not fit); results in {s.run_dir}/ (exit code 3)"
    assert json.loads((s.run_dir / "summary.json").read_text())["run"]["stop_reason"] == "guard_abort"
