"""The per-request export (--requests-jsonl) of real runs against the simulator: one line per
request the summary counts (ok + failed, the start check's probes included), locally and with
--processes 2 (the workers ship their lines to the master: one file in the run folder)."""

from __future__ import annotations

import json
import re

import pytest

from loadgen.stats.request_line import FIELDS
from tests.support.runlocust import SMOKE, fixed_sim, run_locust

pytestmark = pytest.mark.integration
sim = fixed_sim
ID_PREFIX = {"completions": "cmpl", "chat": "chatcmpl"}  # vLLM's stream ids


def counted(summary: dict) -> int:
    """Requests the summary counts: ok + failed over the whole run (probes included)."""
    totals = summary["totals"]
    return totals["requests"] + sum(totals["errors"].values())


def lines_of(run) -> list[dict]:
    return [json.loads(line) for line in (run.run_dir / "requests.jsonl").read_text().splitlines()]


def check_lines(run, workers: set[str]) -> list[dict]:
    assert run.code == 0, run.stderr[-2000:]
    lines = lines_of(run)
    summary = run.summary
    assert len(lines) == counted(summary) > 0
    assert all(tuple(line) == FIELDS for line in lines)
    assert {line["run"] for line in lines} == {summary["run"]["name"]}
    assert len({line["request_id"] for line in lines}) == len(lines)
    assert {line["worker"] for line in lines if line["phase"] == "load"} == workers
    assert [line for line in lines if line["phase"] == "probe"], "the start check's probes are lines too"
    for row in summary["stages"]:  # each stage's requests are the lines of that stage
        in_stage = [line for line in lines if line["stage"] == row["index"]]
        assert len([line for line in in_stage if line["ok"]]) == row["requests"]
    ok = [line for line in lines if line["ok"]]
    assert all(line["output_tokens"] == 20 and line["input_tokens_asked"] > 0 and line["status"] == 200 and line["ttft_s"] > 0.015 for line in ok if line["phase"] == "load")
    assert sum(line["output_tokens"] for line in ok) == summary["totals"]["output_tokens"]
    assert all(line["sent_unix_s"] > 1.7e9 for line in lines)  # seconds since the epoch, not perf_counter
    # each line joins the server's logs: the x-request-id we sent (unique), and the stream's id,
    # which the simulator, as vLLM, makes from it (cmpl-<x-request-id>)
    assert all(re.fullmatch(r"[0-9a-f]{32}", line["x_request_id"]) for line in lines)
    assert len({line["x_request_id"] for line in lines}) == len(lines)
    assert all(line["response_id"] == f"{ID_PREFIX[summary['run']['endpoint']]}-{line['x_request_id']}"
               for line in ok)
    return lines


def test_a_local_run_writes_one_line_per_counted_request(sim, tmp_path):
    run = run_locust(sim.url, tmp_path / "r", *SMOKE, "--stages", "1,2", "--requests-jsonl")
    check_lines(run, {"local"})


def test_two_processes_write_one_file_with_every_workers_requests(sim, tmp_path):
    run = run_locust(sim.url, tmp_path / "r", *SMOKE, "--stages", "2,4", "--requests-jsonl",
                     "--processes", "2")
    run_lines = lines_of(run)
    workers = {line["worker"] for line in run_lines if line["phase"] == "load"}
    # the workers' client ids (one worker may have had no user in a stage it joined late, on a busy machine)
    assert 1 <= len(workers) <= 2 and workers.isdisjoint({"local", "master"}), workers
    assert {line["worker"] for line in run_lines if line["phase"] == "probe"} == {"master"}
    check_lines(run, workers)
    assert not list(run.run_dir.glob("requests*.part*"))  # no parts to merge: the master wrote it


def test_a_chat_run_carries_vllms_chat_ids(sim, tmp_path):
    run = run_locust(sim.url, tmp_path / "r", *SMOKE, "--stages", "1", "--endpoint", "chat", "--requests-jsonl")
    lines = check_lines(run, {"local"})
    assert all(line["response_id"].startswith("chatcmpl-") for line in lines if line["ok"])


def test_without_the_option_there_is_no_file(sim, tmp_path):
    run = run_locust(sim.url, tmp_path / "r", *SMOKE, "--stages", "1")
    assert run.code == 0 and not (run.run_dir / "requests.jsonl").exists()


def test_an_open_loop_run_writes_its_lines_with_the_scheduled_send_times(sim, tmp_path):
    """Open loop: the guard's duration sample is a probe line too, and each request's sent time
    is its scheduled arrival on the wall clock: the stage's arrivals span about its window."""
    run = run_locust(sim.url, tmp_path / "r", *SMOKE, "--rates", "20", "--requests-jsonl")
    lines = check_lines(run, {"local"})
    sent = sorted(x["sent_unix_s"] for x in lines if x["stage"] == 0)
    assert len(sent) > 20 and 1.5 < sent[-1] - sent[0] < 3.0  # a 2 s window at 20 requests/s
