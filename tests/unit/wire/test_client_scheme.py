"""The start check's scheme probe: an https:// URL for a plain-HTTP server, an http:// URL for a TLS
server, told quickly and named (loadgen.wire.scheme.check_scheme), against
hand-made plain servers in this process and a TLS server of its own (tests.support.tlsserver)."""

from __future__ import annotations

import socket
import ssl
import time

import gevent
import pytest

from loadgen import errors
from loadgen.errors import ConfigError, RequestError, SchemeMismatch
from loadgen.wire.client import check_host, transport_failure
from loadgen.wire.gevent_io import ConnectError, handshake_grace_s
from loadgen.wire.scheme import check_scheme, plain_http_refused, plain_status, with_scheme
from tests.support.rawserver import raw_server, read_request
from tests.support.tlsserver import cert_or_skip, tls_server

CONNECT_TIMEOUT_S = 10.0  # the default request.connect_timeout_s: what the user used to wait


def answer(status: int):
    """A plain-HTTP server that reads a request head to its blank line, then answers ``status``:
    a ClientHello (no blank line) leaves it waiting, like the simulator and Python's http.server."""
    def handler(sock):
        if read_request(sock):
            sock.sendall(b"HTTP/1.1 %d X\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}" % status)
    return handler


def timed_check(url: str, timeout_s: float = CONNECT_TIMEOUT_S) -> tuple[RequestError | None, float]:
    t0 = time.monotonic()
    found = check_scheme(url, timeout_s)
    return found, time.monotonic() - t0


def test_https_to_a_plain_server_that_never_answers_the_handshake_is_named_within_the_grace(monkeypatch):
    """The check waits the handshake grace, not the connect timeout. The grace grows with the
    measured TCP connect (8 round trips, at least 1 s), and a busy machine's connect can take long,
    so the bound is on what the check took beyond the grace it actually used."""
    from loadgen.wire import gevent_io

    graces: list[float] = []

    def recorded(connect_s: float, timeout_s: float) -> float:
        graces.append(handshake_grace_s(connect_s, timeout_s))
        return graces[-1]

    monkeypatch.setattr(gevent_io, "handshake_grace_s", recorded)
    with raw_server(answer(200)) as url:
        found, took = timed_check(url.replace("http://", "https://"))
    assert isinstance(found, SchemeMismatch) and found.kind == errors.CONNECT_FAILED
    assert found.spoken == "http"
    assert found.message == "TLS handshake failed: the server speaks plain HTTP (it answered a plain request " \
                            f"with HTTP 200); use --host {url}"
    (grace,) = graces
    assert grace >= 1.0  # HANDSHAKE_GRACE_S at least (test_the_grace_is_a_second_or_many_round_trips... pins the formula)
    assert took - grace < CONNECT_TIMEOUT_S / 2  # after the grace: one plain request, not another timeout


def test_https_to_a_plain_server_that_answers_the_hello_with_400_is_named():
    """uvicorn/httptools answer a ClientHello with a plain 400 at once: the handshake fails fast,
    and the plain question shows a plain server (it answers a well-formed request with 404)."""
    def handler(sock):
        first = sock.recv(65536)
        if first[:1] == b"\x16":  # a TLS record: the ClientHello
            sock.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        else:
            sock.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

    with raw_server(handler) as url:
        found, _ = timed_check(url.replace("http://", "https://"))
    assert isinstance(found, SchemeMismatch) and found.spoken == "http" and "HTTP 404" in found.message


def test_a_400_to_the_plain_request_proves_nothing():
    """nginx and Go answer plain HTTP on their TLS port with 400: a server that only answers 400 is
    not called plain HTTP (the run's own request reports what it finds)."""
    with raw_server(answer(400)) as url:
        found, took = timed_check(url.replace("http://", "https://"), timeout_s=2.0)
    assert found is None and took < 3


def test_a_server_that_answers_nothing_proves_nothing_within_the_timeout():
    def handler(sock):
        gevent.sleep(5)

    with raw_server(handler) as url:
        found, took = timed_check(url.replace("http://", "https://"), timeout_s=1.5)
    assert found is None and took < 2.5


def test_a_closed_port_is_connect_failed_at_once():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    found, _ = timed_check(f"https://127.0.0.1:{port}")
    assert type(found) is RequestError and found.kind == errors.CONNECT_FAILED
    assert "refused" in found.message.lower()


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    return cert_or_skip(tmp_path_factory)


def test_a_tls_server_passes_the_https_check_and_is_named_behind_http(cert):
    with tls_server(*cert) as url:
        assert check_scheme(url, CONNECT_TIMEOUT_S) is None  # self-signed: its certificate is the run's business
        found, took = timed_check(url.replace("https://", "http://"))
    assert isinstance(found, SchemeMismatch) and found.spoken == "https"
    assert found.message == f"the server speaks TLS, not plain HTTP (it completed a TLS handshake); use --host {url}"
    assert took < CONNECT_TIMEOUT_S / 2


def test_an_http_check_of_a_plain_server_proves_nothing():
    with raw_server(answer(200)) as url:
        found, _ = timed_check(url, timeout_s=2.0)
    assert found is None


# -- pure parts --------------------------------------------------------------------------------------

@pytest.mark.parametrize("answer_bytes,status", [
    (b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", 404),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}", 200),
    (b"\x15\x03\x03\x00\x02\x02\x46", None),  # a TLS alert: not HTTP
    (b"", None),  # closed without a word
])
def test_the_plain_question_reads_only_an_http_status(answer_bytes, status):
    def handler(sock):
        if read_request(sock):
            sock.sendall(answer_bytes)

    with raw_server(handler) as url:
        assert plain_status(url, 2.0) == status


def test_the_grace_is_a_second_or_many_round_trips_never_past_the_timeout():
    assert handshake_grace_s(0.001, 10) == 1.0
    assert handshake_grace_s(0.6, 10) == pytest.approx(4.8)  # a 600 ms link
    assert handshake_grace_s(0.6, 3) == 3


@pytest.mark.parametrize("host,scheme,expected", [
    ("https://127.0.0.1:8000", "http", "http://127.0.0.1:8000"),
    ("https://h.example/base", "http", "http://h.example:443/base"),  # the port the server listens on
    ("http://[::1]:9000", "https", "https://[::1]:9000"),
])
def test_with_scheme_keeps_the_server_and_its_port(host, scheme, expected):
    assert with_scheme(host, scheme) == expected


@pytest.mark.parametrize("exc,refused", [
    (RequestError(errors.CONNECTION_RESET, "connection closed before the response"), True),
    (RequestError(errors.NOT_OPENAI, "invalid HTTP"), True),
    (RequestError(errors.HTTP_4XX, "HTTP 400: The plain HTTP request was sent to HTTPS port", status=400), True),
    (RequestError(errors.NOT_OPENAI, "HTTP 404, not JSON", status=404), False),
    (RequestError(errors.CONNECT_FAILED, "Connection refused"), False),
    (RequestError(errors.HTTP_4XX, "HTTP 401", status=401), False),
])
def test_plain_http_refused_is_what_a_tls_server_does_with_plain_http(exc, refused):
    assert plain_http_refused(exc) is refused


def test_a_tls_error_at_connect_names_tls_without_the_c_source():
    cause = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)")
    failure = transport_failure(ConnectError(cause), connected=False)
    assert (failure.kind, failure.message) == (errors.CONNECT_FAILED, "TLS handshake failed: [SSL: "
                                               "WRONG_VERSION_NUMBER] wrong version number")


@pytest.mark.parametrize("host", ["http://127.0.0.1:abc", "https://h.example:99999"])
def test_a_port_that_is_not_a_port_is_a_config_error_not_a_traceback(host):
    with pytest.raises(ConfigError, match="the port must be a number from 0 to 65535"):
        check_host(host)
