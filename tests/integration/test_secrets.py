"""The API key never leaves the Authorization header (issue 7).

A real sweep runs with OPENAI_API_KEY set to a unique sentinel against a scripted server that is
as unhelpful as possible: it echoes the key back in error bodies (before the stream, in a
mid-stream error event, inside an invalid chunk, in /v1/models and every probe's 404). The
sentinel must then appear nowhere we write: stdout, stderr, every file of the results directory,
the exporter's /metrics, Locust's --csv and --html files. The server must have received it as
``Authorization: Bearer <key>`` on every request.
"""

from __future__ import annotations

import uuid

import orjson
import pytest

from loadgen import errors
from tests.integration.test_faults import (
    DONE,
    END,
    ERR,
    SCRIPT,
    Poller,
    ScriptedServer,
    _content,
    _status,
    run_locust_coop,
)
from tests.support.ports import free_port
from tests.support.rawserver import SSE_HEADERS, chunk, event, raw_server
from tests.support.runlocust import run_dir

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SECRET = f"sk-sentinel-{uuid.uuid4().hex}"


def _auth(head: bytes) -> str:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"authorization":
            return value.strip().decode()
    return "(none)"


def _echo_status(code: int):
    return lambda head: _status(code, f"invalid API key: {_auth(head)}")


def _echo_stream_error(head: bytes) -> bytes:
    err = {"error": {**ERR, "message": f"key {_auth(head)} revoked"}}
    return SSE_HEADERS + _content(2) + chunk(event(err)) + DONE + END


def _echo_bad_json(head: bytes) -> bytes:
    return SSE_HEADERS + _content(1) + chunk(b'data: {"key": "%s", \n\n' % _auth(head).encode()) + END


ECHO_SCRIPT = {
    "ok": SCRIPT["ok"],
    "echo_401": (_echo_status(401), True, errors.HTTP_4XX, 0),
    "echo_500": (_echo_status(500), True, errors.HTTP_5XX, 0),
    "echo_stream_error": (_echo_stream_error, True, errors.STREAM_ERROR, 2),
    "echo_bad_json": (_echo_bad_json, False, errors.MALFORMED_CHUNK, 1),
}


class EchoServer(ScriptedServer):
    """Every non-completion path answers an error that quotes the Authorization header."""

    def respond(self, path: bytes, head: bytes) -> bytes:
        return _status(401 if path == b"/v1/models" else 404, f"{path.decode()}: bad key {_auth(head)}")


def _files(root):
    return [p for p in sorted(root.rglob("*")) if p.is_file()]


def test_the_key_is_sent_as_bearer_and_never_written_anywhere(tmp_path):
    server = EchoServer(ECHO_SCRIPT)
    port = free_port()
    with raw_server(server) as url:
        poller = Poller(f"http://127.0.0.1:{port}")
        try:
            run = run_locust_coop(
                url, tmp_path / "res", "--scenario", "config/smoke.yaml", "--output-tokens", "5",
                "--stages", "2,4", "--warmup", "1", "--stage-duration", "2", "--model", "scripted",
                "--exporter-port", str(port), "--csv", str(tmp_path / "csv" / "locust"),
                "--html", str(tmp_path / "html" / "report.html"), env={"OPENAI_API_KEY": SECRET})
        finally:
            poller.stop()
    assert run.code == errors.EXIT_FAILURES, run.stderr[-3000:]
    # the server did get the key, on every request, as a bearer token
    posts = [head for line, head in server.headers if line.startswith(b"POST")]
    assert len(posts) >= 20 and all(_auth(h) == f"Bearer {SECRET}" for _, h in server.headers)
    assert set(server.served) == set(ECHO_SCRIPT)  # every echoing case was served
    assert any(b"/v1/models" in line for line, _ in server.headers)
    # it reached our error paths (the discovery warning quotes the server) and was redacted there
    assert "<API key>" in run.stderr
    # ...and is nowhere we write
    assert SECRET not in run.stdout and SECRET not in run.stderr
    files = _files(tmp_path / "res") + _files(tmp_path / "csv") + _files(tmp_path / "html")
    names = {p.name for p in files}
    assert {"summary.json", "stages.csv", "locust_stats.csv", "locust_failures.csv", "report.html"} <= names
    leaked = [p for p in files if SECRET.encode() in p.read_bytes()]
    assert leaked == []
    assert poller.last is not None and poller.scrapes >= 3
    assert not any(SECRET in str(k) for k in poller.last)


def test_a_fatal_message_quoting_the_server_is_redacted(tmp_path):
    """No --model: discovery fails with the server's 401 text (which holds the key): exit 4."""
    with raw_server(EchoServer(ECHO_SCRIPT)) as url:
        run = run_locust_coop(url, tmp_path / "res", "--scenario", "config/smoke.yaml",
                              env={"OPENAI_API_KEY": SECRET}, timeout_s=60)
    assert run.code == errors.EXIT_SERVER_UNUSABLE, run.stderr[-3000:]
    (line,) = [ln for ln in run.stderr.splitlines() if "/v1/models" in ln]
    assert "HTTP 401" in line and "<API key>" in line and "check the API key in" in line
    assert SECRET not in run.stderr + run.stdout
    assert all(SECRET.encode() not in p.read_bytes() for p in _files(tmp_path / "res"))
    assert orjson.loads((run_dir(tmp_path / "res") / "summary.json").read_bytes())["run"]["stop_reason"] == "error"


def test_a_credential_header_is_sent_and_redacted_like_the_key(tmp_path):
    """--header 'Authorization: Bearer ...' (a gateway's token, no api_key_env): sent on every
    request, echoed back by the server in errors, and written nowhere: summary.json's scenario shows
    <hidden>, every line and Locust's failure files <header Authorization>."""
    token = f"gw-sentinel-{uuid.uuid4().hex}"
    server = EchoServer(ECHO_SCRIPT)
    with raw_server(server) as url:
        run = run_locust_coop(
            url, tmp_path / "res", "--scenario", "config/smoke.yaml", "--output-tokens", "5",
            "--stages", "2", "--warmup", "1", "--stage-duration", "2", "--model", "scripted",
            "--api-key-env", "NO_SUCH_KEY_VARIABLE", "--header", f"Authorization: Bearer {token}",
            "--csv", str(tmp_path / "csv" / "locust"))
    assert run.code == errors.EXIT_FAILURES, run.stderr[-3000:]
    assert server.headers and all(_auth(h) == f"Bearer {token}" for _, h in server.headers)
    assert "<header Authorization>" in run.stderr
    assert token not in run.stdout + run.stderr
    files = _files(tmp_path / "res") + _files(tmp_path / "csv")
    assert {"summary.json", "locust_failures.csv"} <= {p.name for p in files}
    assert [p for p in files if token.encode() in p.read_bytes()] == []
    summary = orjson.loads((run_dir(tmp_path / "res") / "summary.json").read_bytes())
    assert summary["scenario"]["request"]["headers"] == {"Authorization": "<hidden>"}
