"""A new user's first day (issue 14), end to end through real locust processes.

Never lose a run (one folder per run), flags that fire only on evidence, a web-UI run that
finishes, a not-OpenAI server stopped in one line, a quiet console that ends with the stage
table, names that say what ran, compare that refuses a run compared with itself, and listeners
on 127.0.0.1 only. One good headless run (``console_run``) serves several tests: each run costs
seconds, and the suite runs on a 2-core machine.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from loadgen import errors
from loadgen.report.__main__ import main as report_main
from loadgen.run_folder.folders import FAILED, LATEST, run_folders
from loadgen.sim.launch import running_sim
from loadgen.stats.flags import meaning
from tests.support.ports import free_port
from tests.support.runlocust import ROOT, SMOKE, fixed_sim, run_locust
from tests.support.tlsserver import self_signed_cert, tls_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

fixed = fixed_sim  # the module's simulator


@pytest.fixture(scope="module")
def console_run(fixed, tmp_path_factory):
    """A good two-stage smoke run at INFO, the log level a user gets, as a user starts it. C=120 in a
    1 s ramp: a spawn rate of 120/s (Locust warns above 100), chosen by the tool, not by the user.
    Returns the run and its folder (fixed now: a later run in the same results directory moves
    ``latest``)."""
    run = run_locust(fixed.url, tmp_path_factory.mktemp("console") / "results", *SMOKE, "--stages", "2,120",
                     "--ramp", "1", "--stage-duration", "1", "--loglevel", "INFO", plots=True)
    assert run.code == errors.EXIT_OK, run.stderr[-3000:]
    return run, run.run_dir


def llm_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("llm-loadgen:")]


# -- never lose a run ------------------------------------------------------------------------------

def test_a_failed_run_after_a_good_one_keeps_both(console_run, capsys):
    good, good_dir = console_run
    results = good.results_dir
    before = {p.name: p.read_bytes() for p in good_dir.iterdir()}
    assert {"summary.json", "stages.csv", "report.html", "throughput.png"} <= set(before)

    refused = run_locust(f"http://127.0.0.1:{free_port()}", results, *SMOKE, "--stages", "1,2")
    assert refused.code == errors.EXIT_SERVER_UNUSABLE, refused.stderr[-3000:]
    bad_dir = refused.run_dir
    assert bad_dir != good_dir and [p.name for p in run_folders(results)] == [good_dir.name, bad_dir.name]
    assert {p.name: p.read_bytes() for p in good_dir.iterdir()} == before  # not one byte replaced
    # latest still names the good run; the failed start keeps its folder, marked FAILED
    assert (results / LATEST).resolve() == good_dir.resolve()
    assert (bad_dir / FAILED).read_text().startswith("error: this run measured no stage")
    assert not (good_dir / FAILED).exists()
    assert refused.summary["run"]["stop_reason"] == "error" and refused.summary["stages"] == []
    assert f"results in {bad_dir}/" in refused.stderr

    # report build on a run folder rebuilds that run's report
    assert report_main(["build", str(good_dir)]) == errors.EXIT_OK
    assert f"wrote {good_dir}/report.html" in capsys.readouterr().out


def test_the_run_name_is_the_effective_scenario_and_compare_warns_when_runs_differ(fixed, console_run,
                                                                                   tmp_path, capsys):
    a_dir = console_run[1]
    b = run_locust(fixed.url, tmp_path / "b", *SMOKE, "--stages", "1", "--input-tokens", "32",
                   "--output-tokens", "10", "--stage-duration", "1")
    assert b.code == errors.EXIT_OK, b.stderr[-3000:]
    assert json.loads((a_dir / "summary.json").read_text())["run"]["name"] == "smoke_completions-64-20_c2-120"
    assert b.summary["run"]["name"] == "smoke_completions-32-10_c1-1"
    assert b.run_dir.name.endswith("_smoke_completions-32-10_c1-1")
    assert "smoke_completions-32-10_c1-1" in (b.run_dir / "report.html").read_text()
    assert report_main(["compare", str(a_dir), str(tmp_path / "b"), "--out", str(tmp_path / "cmp")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        "warning: the runs differ in scenario: #1 completions 64/20 tokens, #2 completions 32/10 tokens")
    # a results directory stands for its newest run: passing it twice compares nothing, and says so
    assert report_main(["compare", str(tmp_path / "b"), str(b.run_dir)]) == errors.EXIT_CONFIG
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert f"#1 and #2 are the same run, {b.run_dir.resolve()}" in err and "holds no other run" in err


# -- a quiet console -------------------------------------------------------------------------------

FINAL_LINES = re.compile(r"(\s+C\s+reqs|\s+total|\s+\d+\s+\d+\s|knee: |KV ceiling: |guard: |SLO: |flag \w+: )")


def test_headless_console_is_stage_rows_in_order_and_ends_with_the_final_table(console_run):
    run, run_dir = console_run
    out = run.stdout + run.stderr
    assert "spawn rate is very high" not in out and "Ramping to" not in out
    # Locust's stats tables: neither every 2 s nor at the end (its "Aggregated" and percentile rows)
    assert "Aggregated" not in out and "Response time percentiles" not in out, out[-3000:]
    lines = run.stderr.splitlines()
    ramp1 = next(i for i, ln in enumerate(lines) if "stage 1 C=120: ramp" in ln)
    row0 = next(i for i, ln in enumerate(lines) if re.match(r"\s+2\s+\d+\s", ln))
    assert row0 < ramp1  # stage 0's row first, then the next stage's ramp line
    # the last thing on the console: the final table, its summary and flag legend, where the results are
    head = max(i for i, ln in enumerate(lines) if re.match(r"\s+C\s+reqs", ln))
    assert lines[-1] == f"llm-loadgen: completed; results in {run_dir}/ (exit code 0)", lines[-5:]
    assert all(FINAL_LINES.match(ln) for ln in lines[head:-1]), lines[head:]
    assert [ln for ln in lines[head:] if re.match(r"\s+\d+\s+\d+\s", ln)][-1].lstrip().startswith("120 ")
    assert not re.search(r"\d\.\d{5,}", run.stderr)  # every figure rounded


# -- server_over_capacity on evidence --------------------------------------------------------------

def _over(summary: dict) -> dict[int, bool]:
    return {s["concurrency"]: "server_over_capacity" in s["flags"] for s in summary["stages"]}


# 1 s windows (each lasts until C requests finished in it) polled ~10 times: the queue and KV rules
# need half of a stage's polls (and 2), so a request caught queued now and then (~2 % of polls at
# C=4 below) cannot make a flag
WATCHED_WINDOWS = ("--stage-duration", "1", "--set", "guard.watch_interval_s=0.1")


def test_no_over_capacity_flag_on_a_healthy_sweep_although_requests_queue_briefly(tmp_path):
    """The issue's 200/200 sweep (it flagged C=16 at 0.3% KV with one request waiting), up to C=256,
    where the users' prefill bursts queue a real fraction of them for a moment (the demo's C=256 was
    flagged that way at 26% KV): the simulated Qwen3.5-397B server has room for all of it."""
    with running_sim("--preset", "qwen35-397b-8gpu", "--time-scale", "10") as sim:
        run = run_locust(sim.url, tmp_path / "res", "--input-tokens", "200", "--output-tokens", "200",
                         "--stages", "16,64,256", "--warmup", "1", "--ramp", "1",
                         *WATCHED_WINDOWS)
    assert run.code == errors.EXIT_OK, run.stderr[-3000:]
    servers = [s["server"] for s in run.summary["stages"]]
    for server in servers:
        assert server["polls"] >= 3 and server["over_capacity"] is False, server
        assert server["over_capacity_evidence"] == []
    assert any(server["waiting_max"] for server in servers), servers  # it queued, and that is fine
    assert _over(run.summary) == {16: False, 64: False, 256: False}
    assert meaning("server_over_capacity") not in run.stderr


def test_a_server_that_preempts_is_flagged_with_its_evidence_and_the_legend(tmp_path):
    # 8,192 KV tokens: 64 streams of 200 + 200 need 25,600; vLLM-style, it queues and preempts
    with running_sim("--preset", "llama8b-1gpu-vllm", "--time-scale", "10", "--kv-tokens", "8192",
                     "--max-model-len", "4096") as sim:
        run = run_locust(sim.url, tmp_path / "res", "--input-tokens", "200", "--output-tokens", "200",
                         "--stages", "4,64", "--warmup", "1", "--ramp", "1",
                         "--guard-action", "warn", *WATCHED_WINDOWS)
    assert run.code == errors.EXIT_OK, run.stderr[-3000:]
    assert _over(run.summary) == {4: False, 64: True}
    big = run.summary["stages"][1]
    assert big["server"]["preemptions"] > 0
    assert any(e.startswith("preemptions +") for e in big["server"]["over_capacity_evidence"])
    # the console explains the stage and, after the final table, every flag it shows
    assert "stage 1 C=64: the server was over capacity (preemptions +" in run.stderr
    tail = run.stderr[run.stderr.rindex("knee"):]
    assert f"flag server_over_capacity: {meaning('server_over_capacity')}" in tail
    assert f"flag guard_warn: {meaning('guard_warn')}" in tail
    assert '<table id="flags"' in (run.run_dir / "report.html").read_text()


# -- a server that is not OpenAI-compatible ---------------------------------------------------------

@pytest.fixture
def static_server(tmp_path):
    """`python -m http.server` on 127.0.0.1: GET of a missing path is an HTML 404, POST an HTML 501."""
    (tmp_path / "www").mkdir()
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                            cwd=tmp_path / "www", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                urllib.request.urlopen(url + "/", timeout=1).read()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "http.server did not start"
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("model", [None, "foo"])
def test_a_static_file_server_stops_the_run_with_exit_4_in_one_line(static_server, tmp_path, model):
    extra = ("--model", model) if model else ()
    run = run_locust(static_server, tmp_path / "res", *SMOKE, "--stages", "1,4", *extra, timeout_s=90)
    assert run.code == errors.EXIT_SERVER_UNUSABLE, run.stderr[-3000:]
    (line,) = [ln for ln in run.stderr.splitlines() if "is not an OpenAI-compatible server" in ln]
    # the real fix (the base URL), the status, a short excerpt of the page, never the page itself
    assert "check --host" in line and "--model" not in line
    assert ("GET /v1/models: HTTP 404, not JSON" if model is None else "POST /v1/completions: HTTP 501, not JSON") in line
    excerpt = line[line.index("not JSON (") + len("not JSON ("):line.index("); check --host")]
    assert len(excerpt) <= 120 and "<" not in excerpt
    assert "<html" not in run.stderr.lower() and "DOCTYPE" not in run.stderr
    summary = run.summary
    assert summary["run"]["exit_code"] == errors.EXIT_SERVER_UNUSABLE
    failed = sum((summary["totals"]["errors"] or {}).values())
    assert failed <= 8, summary["totals"]  # a handful of requests, not hundreds a second


# -- the wrong scheme: https:// for a plain-HTTP server, http:// for a TLS server -------------------

LONG_CONNECT = ("--set", "request.connect_timeout_s=60")  # what a stalled handshake would wait


def refusal_line(run) -> str:
    assert run.code == errors.EXIT_SERVER_UNUSABLE, run.stderr[-3000:]
    (line,) = [ln for ln in llm_lines(run.stderr) if ln.startswith("llm-loadgen: cannot connect to")]
    return line


def test_https_for_the_plain_simulator_stops_at_once_naming_tls_and_the_fix(fixed, tmp_path):
    """The simulator reads a request head up to its blank line: it never answers a ClientHello, and
    the start check used to wait the whole connect timeout, then say only "connect timed out"."""
    https = fixed.url.replace("http://", "https://")
    t0 = time.monotonic()
    run = run_locust(https, tmp_path / "res", *SMOKE, "--stages", "1", *LONG_CONNECT)
    took_s = time.monotonic() - t0
    assert refusal_line(run) == (f"llm-loadgen: cannot connect to {https}: TLS handshake failed: the server speaks "
                                 f"plain HTTP (it answered a plain request with HTTP 404); use --host {fixed.url}")
    assert took_s < 60 and "timed out" not in run.stderr  # decided by the check, not by the timeout


def test_http_for_a_tls_server_stops_naming_tls_and_the_fix(tmp_path):
    cert = self_signed_cert(tmp_path)
    if cert is None:
        pytest.skip("no openssl command to make a test certificate")
    with tls_server(*cert) as https:
        plain = https.replace("https://", "http://")
        run = run_locust(plain, tmp_path / "res", *SMOKE, "--stages", "1", "--model", "m", *LONG_CONNECT)
    # with --model too: no request gets through, so the start check stops the run
    assert refusal_line(run) == (f"llm-loadgen: cannot connect to {plain}: the server speaks TLS, not plain HTTP "
                                 f"(it completed a TLS handshake); use --host {https}")


# -- the web UI: a run that finishes, on 127.0.0.1 only ----------------------------------------------

def listening_addresses(port: int) -> set[str]:
    """Local addresses (hex, as /proc/net/tcp* has them) of the sockets listening on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for row in Path(table).read_text().splitlines()[1:]:
            cols = row.split()
            addr, hexport = cols[1].split(":")
            if cols[3] == "0A" and int(hexport, 16) == port:  # 0A: LISTEN
                found.add(addr)
    return found


LOOPBACK_V4 = "0100007F"  # 127.0.0.1, little-endian hex


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def test_a_web_ui_run_with_autostart_finishes_and_the_ui_stays_up_on_loopback(fixed, tmp_path):
    web, master = free_port(), free_port()
    results = tmp_path / "results"
    cmd = [sys.executable, "-m", "locust", "-f", str(ROOT / "locustfile.py"), "--host", fixed.url,
           "--web-port", str(web), "--master-bind-port", str(master), "--master-port", str(master),
           "--processes", "1", "--autostart",
           *SMOKE, "--stages", "1", "--results-dir", str(results), "--loglevel", "WARNING"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        view, deadline = None, time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                view = get_json(f"http://127.0.0.1:{web}/llm/stats")
            except OSError:
                view = None
            if view and view["run"]["ended_at"]:
                break
            time.sleep(0.5)
        assert proc.poll() is None, "the web UI process exited after the sweep"
        assert view and view["run"]["ended_at"], view
        # both listeners on 127.0.0.1 and nowhere else (Locust's own defaults: every interface)
        assert listening_addresses(web) == {LOOPBACK_V4}
        assert listening_addresses(master) == {LOOPBACK_V4}
        run = next(iter(run_folders(results)))
        summary = json.loads((run / "summary.json").read_text())
        assert summary["run"]["ended_at"] == view["run"]["ended_at"] and summary["run"]["exit_code"] == 0
        assert [s["concurrency"] for s in summary["stages"]] == [1]
        assert all((run / f"{name}.png").stat().st_size > 0 for name in ("throughput", "latency", "tradeoff"))
        assert "data:image/png;base64," in (run / "report.html").read_text()  # the report has its plots
        stats = get_json(f"http://127.0.0.1:{web}/stats/requests")
        run_tab = next(t for t in stats["extended_stats"] if t["key"] == "llm-run")["data"]
        phase = next(r["value"] for r in run_tab if r["item"] == "Phase")
        assert phase.startswith("finished at ") and "exit code 0" in phase
        time.sleep(0.5)
        assert get_json(f"http://127.0.0.1:{web}/llm/stats")["run"]["ended_at"] == summary["run"]["ended_at"]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            code = proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
        err = proc.stderr.read()
    assert "knee:" in err or "C  reqs" in err, err[-3000:]  # the final table was printed
    assert "results in " in err and "warning: the web UI listens" not in err
    assert code == 0, err[-3000:]  # the process ends later with the run's exit code
