"""Server faults through the real `locust -f locustfile.py` command line (issue 7).

Every fault must end up as one failure in Locust's stats and in summary.json under its stable
category (loadgen.errors), the run carrying on. Counts are compared exactly with what the server
did: the simulator's ``llmsim_faults_injected_total{kind}`` and a scripted raw server's own tally,
both read after locust exited (the sweep's drain waits until no request is in flight, so every
request the server saw was also recorded by us).

Locust runs are waited for with gevent's subprocess so a raw server in this process keeps serving.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import gevent
import gevent.subprocess
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadgen import errors
from loadgen.sim.launch import SimProcess, running_sim
from loadgen.stats.failures import locust_name
from tests.support.ports import free_port
from tests.support.raw_client import request
from tests.support.rawserver import SSE_HEADERS, chunk, completion_chunk, event, raw_server, read_request
from tests.support.runlocust import ROOT, LocustRun, locust_cmd, run_dir

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

OUT = 20  # output tokens per request in the simulator runs
SHORT = ("--scenario", "config/smoke.yaml", "--warmup", "1", "--set", "request.read_timeout_s=1")
LOCUST_SUMMARY = "--only-summary"  # Locust's own final tables (a headless run drops them otherwise)


# -- harness shared with the other issue-7 test files ----------------------------------------------

def run_locust_coop(host: str, results: Path, *args: str, env: dict | None = None,
                    timeout_s: float = 120) -> LocustRun:
    """tests.support.runlocust.run_locust, waiting cooperatively (a raw_server here keeps serving)."""
    cmd = locust_cmd(host, "--results-dir", str(results), *args)
    proc = gevent.subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s,
                                 env={**os.environ, **(env or {})})
    return LocustRun(proc.returncode, proc.stdout, proc.stderr, Path(results))


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """Every sample of a Prometheus /metrics page: {(name, sorted label items): value}."""
    resp = request(url, "GET", "/metrics", timeout_s=5)
    if resp.status != 200 or not resp.complete:
        raise ValueError(f"{url}/metrics answered {resp.status} {resp.body[:300]!r}")
    text = resp.body.decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def by_label(samples: dict, name: str, label: str, **match: str) -> dict[str, float]:
    out = {}
    for (n, labels), v in samples.items():
        d = dict(labels)
        if n == name and all(d.get(k) == want for k, want in match.items()):
            out[d[label]] = v
    return out


def locust_names(summary: dict) -> dict:
    """What Locust's error report must hold: our failures by kind and HTTP status (http_500 ...)."""
    failures = dict(summary["totals"]["failures"])
    other = failures.pop("other_messages", {})
    out: Counter = Counter()
    for kind, entries in failures.items():
        for e in entries:
            out[locust_name(kind, e["status"])] += e["requests"]
    for kind, n in other.items():  # messages beyond the bound (they vary: "after N chunks"): no status
        assert not kind.startswith(("http_", "overload_")), other
        out[kind] += n
    return dict(out)


def locust_final_report(output: str) -> tuple[int, int, Counter]:
    """Locust's own final stats, as it prints them at shutdown: (requests, failures, failures by
    Locust's error name: ``loadgen.stats.failures.locust_name``) from the last "Aggregated" line and the
    "Error report". (Its --csv files are
    rewritten only once a second while it runs, so they can miss the last second.)"""
    lines = output.splitlines()
    # the stats table's row ("Aggregated  571  244(42.73%) | ..."), not the percentiles' one
    m = re.findall(r"^\s+Aggregated\s+(\d+)\s+(\d+)\(", output, re.M)[-1]
    starts = [i for i, ln in enumerate(lines) if ln.startswith("Error report")]  # none: no failure
    counts: Counter = Counter()
    for ln in lines[starts[-1] + 3:] if starts else []:
        row = re.fullmatch(r"\s*(\d+)\s+POST \S+: (\w+)\s*", ln)
        if row is None:
            break
        counts[row.group(2)] += int(row.group(1))
    return int(m[0]), int(m[1]), counts


class Poller:
    """Scrapes a /metrics URL every 0.3 s in a greenlet; keeps the last page that answered."""

    def __init__(self, url: str):
        self.url, self.last, self.scrapes, self.errors = url, None, 0, []
        self._g = gevent.spawn(self._run)

    def _run(self) -> None:
        while True:
            try:
                self.last = scrape(self.url)
                self.scrapes += 1
            except (OSError, EOFError, ValueError) as exc:
                self.errors.append(repr(exc))
            gevent.sleep(0.3)

    def stop(self) -> None:
        self._g.kill()


# -- 1. the simulator's fault kinds, all at once -----------------------------------------------------
SIM_KIND = {  # simulator fault -> our category (None: the request is complete)
    "http_500": errors.HTTP_5XX,
    "http_429": errors.OVERLOAD_429,
    "http_503": errors.OVERLOAD_503,
    "stream_error": errors.STREAM_ERROR,
    "reset": errors.CONNECTION_RESET,
    "stall": errors.READ_TIMEOUT,
    "malformed": errors.MALFORMED_CHUNK,
    "abort": errors.ABORTED,
    "truncate": errors.TRUNCATED,
    "no_done": None,  # a finish reason, then close without [DONE]: complete
}


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory):
    """Every fault kind at 5 % of the requests: 10-30 of each kind in 2 s windows (and the warmups)."""
    tmp = tmp_path_factory.mktemp("simfaults")
    rates = [a for kind in SIM_KIND for a in (f"--fault-{kind.replace('_', '-')}", "0.05")]
    port = free_port()
    with running_sim("--preset", "fixed", "--ttft-ms", "20", "--itl-ms", "5", *rates) as sim:
        poller = Poller(f"http://127.0.0.1:{port}")
        try:
            run = run_locust_coop(sim.url, tmp / "res", *SHORT, LOCUST_SUMMARY, "--output-tokens", str(OUT),
                                  "--stages", "4,8", "--stage-duration", "2", "--exporter-port", str(port))
        finally:
            poller.stop()
        metrics = scrape(sim.url)  # the simulator outlives locust: its final counts
    assert run.code == errors.EXIT_FAILURES, run.stderr[-3000:]
    return run, metrics, poller.last


def test_every_simulator_fault_is_its_category_counted_exactly(sim_run):
    run, metrics, _ = sim_run
    injected = by_label(metrics, "llmsim_faults_injected_total", "kind")
    ours = run.summary["totals"]["errors"]
    expected = {SIM_KIND[k]: int(n) for k, n in injected.items() if SIM_KIND[k]}
    assert all(n > 0 for n in injected.values()), injected  # every kind really happened
    assert ours == expected  # nothing else (no spurious failure kind), nothing missing
    assert dict(locust_final_report(run.stderr)[2]) == locust_names(run.summary)  # Locust's own stats agree
    assert locust_names(run.summary)["http_500"] == expected["http_5xx"]


def test_finish_reason_without_done_is_complete_and_totals_add_up(sim_run):
    run, metrics, _ = sim_run
    completed = metrics[("llmsim_requests_completed_total", (("model_name", "llmsim-fixed"),))]
    no_done = by_label(metrics, "llmsim_faults_injected_total", "kind")["no_done"]
    t = run.summary["totals"]
    assert t["requests"] == completed + no_done
    requests, failures, _ = locust_final_report(run.stderr)
    assert (requests, failures) == (t["requests"] + sum(t["errors"].values()), sum(t["errors"].values()))


def test_failed_requests_tokens_are_counted_apart(sim_run):
    run, metrics, _ = sim_run
    t = run.summary["totals"]
    assert t["output_tokens"] == OUT * t["requests"]  # complete requests only
    assert t["failed_output_tokens"] > 0
    written = metrics[("vllm:generation_tokens_total", (("model_name", "llmsim-fixed"),))]
    assert t["output_tokens"] + t["failed_output_tokens"] <= written


def test_the_run_carries_on_and_stages_hold_their_failures(sim_run):
    run, _, _ = sim_run
    s = run.summary
    assert s["run"]["stop_reason"] == "completed" and s["run"]["exit_code"] == errors.EXIT_FAILURES
    assert [st["concurrency"] for st in s["stages"]] == [4, 8]
    for st in s["stages"]:
        assert st["requests"] > 0 and st["error_count"] == sum(st["errors"].values()) > 0
        assert set(st["errors"]) <= set(s["totals"]["errors"])
    measured = Counter()
    for st in s["stages"]:
        measured.update(st["errors"])
    assert all(measured[k] <= n for k, n in s["totals"]["errors"].items())


def test_exporter_counts_failures_by_kind_and_overload_apart(sim_run):
    run, _, exported = sim_run
    assert exported is not None, "the exporter never answered"
    final = run.summary["totals"]["errors"]
    outcome = {kind: o for (n, labels), _ in exported.items() if n == "llm_loadgen_requests_total"
               for o, kind in [(dict(labels)["outcome"], dict(labels)["kind"])]}
    # every category is a series of its own; 429/503 are "overload", the rest "error"
    assert outcome == {"ok": "ok", **{k: "overload" if k in errors.OVERLOAD_KINDS else "error"
                                      for k in errors.FAILURE_KINDS}}
    seen = {dict(labels)["kind"]: v for (n, labels), v in exported.items()
            if n == "llm_loadgen_requests_total" and dict(labels)["outcome"] != "ok"}
    # The last scrape came at most 0.3 s before the end: most failures are there, none extra.
    assert all(seen.get(k, 0) <= n for k, n in final.items())
    assert sum(seen.values()) >= 0.5 * sum(final.values())


# -- 2. faults the simulator does not make: a scripted raw server --------------------------------------
def _status(code: int, message: str) -> bytes:
    body = orjson.dumps({"error": {"message": message, "type": "X", "code": code}})
    return (b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (code, len(body), body))


def _usage(n: int) -> dict:
    return {"prompt_tokens": 64, "completion_tokens": n, "total_tokens": 64 + n}


def _content(n_tokens: int) -> bytes:
    """n content chunks of one token each, with cumulative usage (vLLM continuous_usage_stats)."""
    return b"".join(chunk(event(completion_chunk("t ", usage=_usage(i + 1)))) for i in range(n_tokens))


END = b"0\r\n\r\n"
DONE = chunk(event(b"[DONE]"))
ERR = {"message": "engine died", "type": "InternalServerError", "param": None, "code": 500}
# name -> (bytes after the request, keep the connection, expected category or None, tokens received)
SCRIPT = {
    "ok": (SSE_HEADERS + _content(4) + chunk(event(completion_chunk("t ", "length", _usage(5)))) + DONE
           + END, True, None, 5),
    "finish_no_done": (SSE_HEADERS + _content(4) + chunk(event(completion_chunk("t ", "length", _usage(5))))
                       + END, True, None, 5),
    "http_400": (_status(400, "prompt too long"), True, errors.HTTP_4XX, 0),
    "http_404": (_status(404, "no such model"), True, errors.HTTP_4XX, 0),
    "http_502": (_status(502, "bad gateway"), True, errors.HTTP_5XX, 0),
    "error_vllm": (SSE_HEADERS + _content(2) + chunk(event({"error": ERR})) + DONE + END,
                   True, errors.STREAM_ERROR, 2),
    "error_sglang": (SSE_HEADERS + _content(2) + chunk(event({"error": {"object": "error", **ERR}})) + DONE
                     + END, True, errors.STREAM_ERROR, 2),
    "error_top_level": (SSE_HEADERS + _content(2) + chunk(event({"object": "error", **ERR})) + DONE + END,
                        True, errors.STREAM_ERROR, 2),
    "abort_sglang": (SSE_HEADERS + _content(3) + chunk(event(completion_chunk(
        "", {"type": "abort", "message": "aborted"}, _usage(3)))) + DONE + END, True, errors.ABORTED, 3),
    "empty_done": (SSE_HEADERS + DONE + END, True, errors.EMPTY_STREAM, 0),
    "empty_finish": (SSE_HEADERS + chunk(event(completion_chunk("", "length", _usage(0)))) + DONE + END,
                     True, errors.EMPTY_STREAM, 0),
    "no_events": (SSE_HEADERS + END, True, errors.EMPTY_STREAM, 0),
    "bad_json": (SSE_HEADERS + _content(1) + chunk(b'data: {"choices": [{"text": "t \n\n'), False,
                 errors.MALFORMED_CHUNK, 1),
    "not_sse": (SSE_HEADERS + chunk(orjson.dumps(completion_chunk("t ", "length", _usage(1))) + b"\n") + END,
                True, errors.MALFORMED_CHUNK, 0),
    "cut_mid_body": (SSE_HEADERS + _content(3), False, errors.CONNECTION_RESET, 3),
}
MODELS = orjson.dumps({"object": "list", "data": [{"id": "scripted", "object": "model"}]})


class ScriptedServer:
    """Answers POST /v1/completions with SCRIPT's cases in turn; counts what it sent.

    A case's bytes may be a function of the request head. Other paths: ``respond`` (GET
    /v1/models answers one model, anything else a 404). Records every request's head.
    """

    def __init__(self, script: dict = SCRIPT):
        self.script = script
        self.cases = itertools.cycle(list(script))
        self.served: Counter = Counter()
        self.headers: list[tuple[bytes, bytes]] = []  # (request line, raw head)

    def __call__(self, sock) -> None:
        while True:
            req = read_request(sock)
            if not req:
                return
            head = req.partition(b"\r\n\r\n")[0]
            line = head.split(b"\r\n", 1)[0]
            self.headers.append((line, head))
            method, path = line.split()[:2]
            if method == b"POST" and path == b"/v1/completions":
                name = next(self.cases)
                data, keep, _, _ = self.script[name]
                self.served[name] += 1
                sock.sendall(data(head) if callable(data) else data)
                if not keep:
                    return
            else:
                sock.sendall(self.respond(path, head))

    def respond(self, path: bytes, head: bytes) -> bytes:
        if path == b"/v1/models":
            return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                    % (len(MODELS), MODELS))
        return _status(404, "not here")

    def expected(self) -> tuple[dict, int, int]:
        """(failures by category, complete requests, tokens received by failed requests)."""
        failures: Counter = Counter()
        ok = failed_tokens = 0
        for name, n in self.served.items():
            _, _, kind, tokens = self.script[name]
            if kind is None:
                ok += n
            else:
                failures[kind] += n
                failed_tokens += n * tokens
        return dict(failures), ok, failed_tokens


SCRIPTED_RUN = (*SHORT, LOCUST_SUMMARY, "--output-tokens", "5", "--input-tokens", "64", "--stages", "2,4",
                "--stage-duration", "1", "--kv-capacity-tokens", "1000000")  # ~120 requests: each case ~8 times


def test_scripted_faults_each_in_their_category_with_exact_counts_and_tokens(tmp_path):
    server = ScriptedServer()
    with raw_server(server) as url:
        run = run_locust_coop(url, tmp_path / "res", *SCRIPTED_RUN)
    assert run.code == errors.EXIT_FAILURES, run.stderr[-3000:]
    failures, ok, failed_tokens = server.expected()
    assert min(server.served.values()) >= 2 and set(server.served) == set(SCRIPT)  # every case ran
    t = run.summary["totals"]
    assert t["errors"] == failures
    assert dict(locust_final_report(run.stderr)[2]) == locust_names(run.summary)
    assert t["requests"] == ok and t["output_tokens"] == 5 * ok
    assert t["failed_output_tokens"] == failed_tokens
    assert run.summary["run"]["stop_reason"] == "completed"
    assert [s["concurrency"] for s in run.summary["stages"]] == [2, 4]


# -- 3. the server dies mid-run and comes back ---------------------------------------------------------
def test_server_killed_mid_run_and_restarted_the_run_carries_on(tmp_path):
    port = free_port()
    sim_args = ["--preset", "fixed", "--ttft-ms", "20", "--itl-ms", "5", "--port", str(port)]
    results = tmp_path / "res"
    sims = [SimProcess(sim_args)]
    proc = subprocess.Popen(
        locust_cmd(sims[0].url, "--results-dir", str(results), *SHORT, "--output-tokens", str(OUT),
                   "--stages", "2,4", "--stage-duration", "3"),
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # stage 0: warmup from 1 s after its ramp, window from ~2 s for >= 3 s; killed at 1 s, back
        # by ~3 s: 2 s before stage 1's ramp, 4 s before its window opens
        for line in proc.stderr:
            if "stage 0 C=2: ramp" in line:
                break
        time.sleep(1.0)
        sims[0].proc.send_signal(signal.SIGKILL)
        sims[0].proc.wait()
        time.sleep(1.0)
        sims.append(SimProcess(sim_args))  # the same port, well before stage 1 starts
        assert sims[1].url == sims[0].url
        err = proc.stderr.read()
        code = proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for sim in sims:
            sim.stop()
    assert code == errors.EXIT_FAILURES, err[-3000:]
    s = json_summary(results)
    assert s["run"]["stop_reason"] == "completed"
    assert [st["concurrency"] for st in s["stages"]] == [2, 4]
    lost = s["totals"]["errors"]
    assert set(lost) <= {errors.CONNECTION_RESET, errors.CONNECT_FAILED} and lost, lost
    # While it is down, users back off (0.05 s doubling to 1 s), not thousands of refusals a second.
    assert lost.get(errors.CONNECT_FAILED, 0) <= 40, lost
    assert s["stages"][1]["requests"] > 0 and s["stages"][1]["error_count"] == 0  # after the restart
    assert "Traceback" not in err


def json_summary(results: Path) -> dict:
    return orjson.loads((run_dir(results) / "summary.json").read_bytes())


# -- 4. not an OpenAI-compatible server ------------------------------------------------------------------
def _html_everywhere(sock) -> None:
    while read_request(sock):
        body = b"<html><body>hello</body></html>"
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s"
                     % (len(body), body))


@pytest.mark.parametrize("extra", [(), ("--model", "m")], ids=["discover-model", "model-given"])
def test_a_server_that_is_not_openai_compatible_stops_the_run_with_one_clear_message(tmp_path, extra):
    with raw_server(_html_everywhere) as url:
        run = run_locust_coop(url, tmp_path / "res", *SHORT, LOCUST_SUMMARY, "--stages", "2",
                              "--kv-capacity-tokens", "1000000", *extra, timeout_s=60)
    assert run.code == errors.EXIT_SERVER_UNUSABLE, run.stderr[-3000:]
    lines = [ln for ln in run.stderr.splitlines() if "OpenAI-compatible" in ln]
    assert len(lines) == 1 and url in lines[0], run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    s = run.summary
    assert s["run"]["stop_reason"] == "error" and s["run"]["exit_code"] == errors.EXIT_SERVER_UNUSABLE
    requests, _, _ = locust_final_report(run.stderr)
    # stopped at the first answers (none when discovery already failed), not a flood of failures
    assert (1 if extra else 0) <= requests <= 4, requests


def test_a_worker_that_finds_the_server_unusable_stops_the_distributed_run(tmp_path):
    """The master's start checks pass (model given); the worker's first answers are not OpenAI:
    the worker tells the master, which stops the run with one line and exit code 4."""
    with raw_server(_html_everywhere) as url:
        # (--processes workers dial Locust's default master port; --master-bind-port is not passed on)
        run = run_locust_coop(url, tmp_path / "dist", *SHORT, "--stages", "2", "--kv-capacity-tokens",
                              "1000000", "--model", "m", "--processes", "1", timeout_s=90)
    assert run.code == errors.EXIT_SERVER_UNUSABLE, run.stderr[-3000:]
    assert "OpenAI-compatible" in run.stderr and "Traceback" not in run.stderr
    s = run.summary
    assert s["run"]["stop_reason"] == "error" and s["run"]["exit_code"] == errors.EXIT_SERVER_UNUSABLE


# -- 5. the client on its own: a kept-alive connection the server closed ------------------------------
def _ok_response() -> bytes:
    return SCRIPT["ok"][0]


def test_a_reused_connection_found_closed_is_retried_once_on_a_new_one():
    """The server ends a complete response, then drops the connection when the next request comes
    (what a keep-alive race with the server's FIN looks like): that request is sent again, once."""
    from loadgen.stats.records import RequestRecord
    from loadgen.wire.client import StreamClient

    connections = []

    def handler(sock):
        connections.append(sock)
        read_request(sock)
        sock.sendall(_ok_response())
        read_request(sock)  # the next request on this connection: no answer, just close

    with raw_server(handler) as url:
        client = StreamClient(url, read_timeout_s=5)
        try:
            results = [client.stream("/v1/completions", b"{}", RequestRecord(time.perf_counter(), 5,
                                                                             "completions"))[0]
                       for _ in range(3)]
        finally:
            client.close()
    assert [r.ok for r in results] == [True, True, True]
    assert len(connections) == 3  # each second request on a connection went to a new one


def test_a_new_connection_closed_before_any_answer_is_a_reset_not_a_retry():
    from loadgen.stats.records import RequestRecord
    from loadgen.wire.client import StreamClient

    connections = []

    def handler(sock):
        connections.append(sock)
        read_request(sock)  # read it, answer nothing, close

    with raw_server(handler) as url:
        client = StreamClient(url, read_timeout_s=5)
        try:
            result, _ = client.stream("/v1/completions", b"{}", RequestRecord(time.perf_counter(), 5,
                                                                               "completions"))
        finally:
            client.close()
    assert result.error_kind == errors.CONNECTION_RESET and len(connections) == 1
