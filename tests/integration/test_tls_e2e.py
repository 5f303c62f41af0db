"""Real runs against the simulator behind TLS (``--tls-cert``, a self-signed certificate for IP
127.0.0.1 made with the openssl command; skipped without it): the start check refuses the
certificate with the fix, ``--ca-cert`` trusts it (``SSL_CERT_FILE``: tests/unit/wire/test_tls.py), ``--insecure`` skips the
check and says so once; a worker gets the settings from the master; a bad ``--ca-cert`` stops
before anything is sent. And the simulator's TLS: a stream its client reads late arrives whole."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import time
from contextlib import ExitStack

import pytest

from loadgen.sim.launch import running_sim
from tests.integration.test_distributed import Cluster
from tests.support.runlocust import ROOT, SMOKE, run_dir, run_locust
from tests.support.tlsserver import cert_or_skip

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

RUN = (*SMOKE, "--stages", "1")
WARNING = "llm-loadgen: warning: TLS certificates are not verified (--insecure)"


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    return cert_or_skip(tmp_path_factory)


@pytest.fixture(scope="module")
def sim(cert):
    with running_sim("--preset", "fixed", "--ttft-ms", "20", "--itl-ms", "5",
                     "--tls-cert", str(cert[0]), "--tls-key", str(cert[1])) as running:
        assert running.url.startswith("https://127.0.0.1:")
        yield running


def llm_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("llm-loadgen:")]


def assert_clean_run(run) -> dict:
    assert run.code == 0, run.stderr[-3000:]
    (stage,) = run.summary["stages"]
    assert stage["requests"] > 0 and stage["error_count"] == 0
    return run.summary


def test_a_self_signed_server_stops_at_the_start_naming_the_certificate_and_the_fix(sim, tmp_path):
    run = run_locust(sim.url, tmp_path / "res", *RUN)
    assert run.code == 4, run.stderr[-3000:]
    assert llm_lines(run.stderr)[0] == (
        f"llm-loadgen: cannot connect to {sim.url}: the server's TLS certificate did not verify (self-signed "
        "certificate); pass the server's CA certificate with --ca-cert PATH, or --insecure to skip the check")
    assert "is the server running" not in run.stderr


def test_ca_cert_trusts_the_server_and_summary_json_records_it(sim, cert, tmp_path):
    summary = assert_clean_run(run_locust(sim.url, tmp_path / "res", *RUN, "--ca-cert", str(cert[0])))
    assert summary["scenario"]["request"]["ca_cert"] == str(cert[0])
    assert summary["scenario"]["request"]["verify_tls"] is True


def test_insecure_runs_says_so_once_and_summary_json_records_it(sim, tmp_path):
    run = run_locust(sim.url, tmp_path / "res", *RUN, "--insecure")
    summary = assert_clean_run(run)
    assert run.stderr.count(WARNING) == 1, run.stderr[-3000:]
    assert summary["scenario"]["request"]["verify_tls"] is False


def test_a_worker_streams_with_the_masters_settings(sim, tmp_path):
    """The worker starts without options: --insecure reaches it with the scenario the master relays
    (without it, its own model discovery fails on the certificate and the run stops, exit 4)."""
    with ExitStack() as stack:
        code, err = Cluster(stack, sim.url, tmp_path / "dist", 1, *SMOKE, "--stages", "2", "--insecure").wait(120)
    assert code == 0, err[-3000:]
    (stage,) = json.loads((run_dir(tmp_path / "dist") / "summary.json").read_text())["stages"]
    assert stage["requests"] > 0 and stage["error_count"] == 0


def test_a_ca_cert_that_is_not_there_stops_before_anything_is_sent(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as listener:  # the kernel queues any connection
        host = f"https://127.0.0.1:{listener.getsockname()[1]}"
        run = run_locust(host, tmp_path / "res", *RUN, "--ca-cert", str(tmp_path / "ca.pem"))
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected
    assert run.code == 2
    assert llm_lines(run.stderr) == [f"llm-loadgen: config error: request.ca_cert: file not found, got "
                                     f"'{tmp_path / 'ca.pem'}' (pass a PEM file with the CA certificate that "
                                     "signed the server's certificate (or the server's own certificate) to "
                                     "--ca-cert, or --insecure to skip the check)"]


# -- the simulator's TLS -----------------------------------------------------------------------------

def test_a_tls_stream_read_late_arrives_whole(cert):
    """20,000 events (4 MB, in about 0.2 s) to a client that reads only after 2 s: the simulator's
    socket buffer fills, its TLS writes wait for the client (loadgen.sim.tls.write_now), nothing
    is lost."""
    with running_sim("--preset", "fixed", "--ttft-ms", "1", "--itl-ms", "0.01",
                     "--tls-cert", str(cert[0]), "--tls-key", str(cert[1])) as fast:
        n = 20_000
        received = read_late(fast.url, cert[0], n)
    assert received.count(b"\ndata: {") == n and received.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")


def read_late(url: str, ca_cert, n: int) -> bytes:
    """The stream of ``n`` tokens, read through a small receive buffer from 2 s after the request."""
    port = int(url.rsplit(":", 1)[1])
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.connect(("127.0.0.1", port))
    with ssl.create_default_context(cafile=str(ca_cert)).wrap_socket(raw, server_hostname="127.0.0.1") as conn:
        body = b'{"model":"m","prompt":[1,2,3],"max_tokens":%d,"ignore_eos":true,"stream":true}' % n
        conn.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        time.sleep(2)
        conn.settimeout(30)
        received = bytearray()
        while not received.endswith(b"\r\n0\r\n\r\n"):
            data = conn.recv(65536)
            assert data, "the simulator closed the stream"
            received += data
    return bytes(received)


def test_the_simulator_refuses_a_certificate_that_does_not_load(cert, tmp_path):
    bad = tmp_path / "key-only.pem"
    bad.write_bytes(cert[1].read_bytes())
    out = subprocess.run([sys.executable, "-m", "loadgen.sim", "--port", "0", "--tls-cert", str(bad)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith(f"llmsim: --tls-cert: cannot load the certificate and key from {bad}: ")
    assert len(out.stderr.splitlines()) == 1
