"""The streaming client against hand-made servers: event timing and failure categories."""

from __future__ import annotations

import socket
import struct
import time

import gevent
import pytest

from loadgen import errors
from loadgen.stats.records import RequestRecord
from loadgen.wire import client as client_module
from loadgen.wire.client import StreamClient
from tests.support.rawserver import (
    SSE_HEADERS,
    chunk,
    completion_chunk,
    event,
    raw_server,
    read_request,
    stream_tokens,
)


def run_stream(url, read_timeout_s=5.0, expected=5):
    client = StreamClient(url, read_timeout_s=read_timeout_s, connect_timeout_s=2)
    record = RequestRecord(time.perf_counter(), expected, "completions")
    seen = []
    result, nbytes = client.stream("/v1/completions", b"{}", record, on_tokens=seen.append)
    client.close()
    return result, nbytes, seen


def test_first_event_is_timestamped_when_it_arrives_not_when_more_bytes_come():
    """FIELD_NOTES: Locust's iter_content/iter_lines returned the first event ~2 s late.

    The server sends the first token 300 ms after the headers, then waits 2 s before the rest: a
    reader that waits for a full block would report TTFT >= 2.3 s.
    """
    with raw_server(lambda s: stream_tokens(s, 5, first_delay_s=0.3, gap_s=0.5)) as url:
        result, _, _ = run_stream(url)
    assert result.ok, result.error_kind
    assert 0.29 <= result.ttft_s < 0.36, result.ttft_s
    assert result.completion_tokens == 5


def test_known_gaps_give_per_token_itl_and_live_token_counts():
    with raw_server(lambda s: stream_tokens(s, 12, 0.05, 0.04, tokens_per_chunk=3)) as url:
        result, nbytes, seen = run_stream(url, expected=12)
    assert result.ok and result.completion_tokens == 12 and nbytes > 0
    assert sum(seen) == 12  # live counts (per-chunk usage) add up to the final usage
    gaps = result.itl_chunk_s
    assert len(gaps) == 3 and all(0.035 < g < 0.07 for g in gaps)
    assert all(0.011 < v < 0.024 for v in result.itl_token_s)  # gap / 3 tokens


def _status(code: int, body: bytes):
    def handler(sock):
        read_request(sock)
        sock.sendall(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                     % (code, len(body), body))
    return handler


@pytest.mark.parametrize("code,kind", [
    (400, errors.HTTP_4XX), (404, errors.HTTP_4XX), (429, errors.OVERLOAD_429),
    (500, errors.HTTP_5XX), (503, errors.OVERLOAD_503),
])
def test_http_status_before_the_stream_is_categorised_with_the_server_message(code, kind):
    body = b'{"error": {"message": "nope", "type": "x", "code": %d}}' % code
    with raw_server(_status(code, body)) as url:
        result, _, _ = run_stream(url)
    assert not result.ok and result.error_kind == kind
    assert "nope" in result.error_message


def _reset_after(n_events: int):
    def handler(sock):
        read_request(sock)
        sock.sendall(SSE_HEADERS)
        for i in range(n_events):
            sock.sendall(chunk(event(completion_chunk("a", usage={"prompt_tokens": 1, "completion_tokens": i + 1}))))
        gevent.sleep(0.05)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    return handler


def test_connection_reset_mid_stream_keeps_the_tokens_received():
    with raw_server(_reset_after(3)) as url:
        result, _, _ = run_stream(url)
    assert result.error_kind == errors.CONNECTION_RESET
    assert result.completion_tokens == 3


def test_stall_past_the_read_timeout():
    def handler(sock):
        read_request(sock)
        sock.sendall(SSE_HEADERS + chunk(event(completion_chunk("a"))))
        gevent.sleep(3)

    with raw_server(handler) as url:
        t0 = time.perf_counter()
        result, _, _ = run_stream(url, read_timeout_s=0.5)
    assert result.error_kind == errors.READ_TIMEOUT
    assert time.perf_counter() - t0 < 2.0


def test_not_an_event_stream_is_not_openai():
    with raw_server(_status(200, b"<html>hello</html>")) as url:
        result, _, _ = run_stream(url)
    assert result.error_kind == errors.NOT_OPENAI


def test_connection_refused_is_connect_failed():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    result, _, _ = run_stream(f"http://127.0.0.1:{port}")
    assert result.error_kind == errors.CONNECT_FAILED


def test_clean_close_without_finish_or_done_is_truncated():
    def handler(sock):
        read_request(sock)
        sock.sendall(SSE_HEADERS + chunk(event(completion_chunk("a"))) + b"0\r\n\r\n")

    with raw_server(handler) as url:
        result, _, _ = run_stream(url)
    assert result.error_kind == errors.TRUNCATED


def test_finish_reason_without_done_is_complete():
    def handler(sock):
        read_request(sock)
        usage = {"prompt_tokens": 1, "completion_tokens": 2}
        sock.sendall(SSE_HEADERS + chunk(event(completion_chunk("a"))) +
                     chunk(event(completion_chunk("b", "length", usage))) + b"0\r\n\r\n")

    with raw_server(handler) as url:
        result, _, _ = run_stream(url, expected=2)
    assert result.ok and result.completion_tokens == 2


def test_keep_alive_connection_is_reused_across_requests():
    connections = []

    def handler(sock):
        connections.append(sock)
        for _ in range(3):
            stream_tokens(sock, 2, 0.0, 0.0)

    with raw_server(handler) as url:
        client = StreamClient(url, read_timeout_s=5)
        for _ in range(3):
            result, _ = client.stream("/v1/completions", b"{}", RequestRecord(time.perf_counter(), 2, "completions"))
            assert result.ok
        client.close()
    assert len(connections) == 1


STATIC_404 = (b'<!DOCTYPE HTML>\n<html lang="en">\n<head><meta charset="utf-8"><title>Error response</title>'
              b"<style>body{color:red}</style></head>\n<body>\n<h1>Error response</h1>\n<p>Error code: 404</p>\n"
              b"<p>Message: File not found.</p></body></html>\n")
UNTITLED = b"<html><body><style>p{color:red}</style><p>" + b"word " * 200 + b"</p></body></html>"


@pytest.mark.parametrize("code", [404, 405, 501])
@pytest.mark.parametrize("page,shown", [(STATIC_404, "Error response"), (UNTITLED, "word word")])
def test_a_path_or_method_missing_without_json_is_not_openai_with_a_short_excerpt(code, page, shown):
    with raw_server(_status(code, page)) as url:
        result, _, _ = run_stream(url)
    assert result.error_kind == errors.NOT_OPENAI
    head, _, excerpt = result.error_message.partition(" (")
    assert head == f"HTTP {code}, not JSON"  # the status is shown
    # the page's title, else its visible text: one line, at most ~120 characters, no tags, no CSS
    excerpt = excerpt.removesuffix(")")
    assert excerpt.startswith(shown) and len(excerpt) <= client_module.BODY_EXCERPT_CHARS
    assert "<" not in result.error_message and "color" not in result.error_message
    assert page is STATIC_404 or excerpt.endswith("…")


@pytest.mark.parametrize("code,body,kind,text", [
    # an OpenAI server's own 404 (unknown model) is JSON: a refusal to fix, not a foreign server
    (404, b'{"object": "error", "message": "The model `foo` does not exist.", "code": 404}',
     errors.HTTP_4XX, "HTTP 404: The model `foo` does not exist."),
    # a proxy's HTML 502 in front of a real server: a 5xx, its page reduced to its text
    (502, b"<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1></body></html>",
     errors.HTTP_5XX, "HTTP 502: 502 Bad Gateway"),
])
def test_json_errors_and_other_statuses_keep_their_kind(code, body, kind, text):
    with raw_server(_status(code, body)) as url:
        result, _, _ = run_stream(url)
    assert (result.error_kind, result.error_message) == (kind, text)


def test_a_full_accept_backlog_is_connect_failed_not_read_timeout():
    """A server that stopped accepting: once its backlog is full the kernel drops new SYNs, so the
    connect times out. That is connect_failed (the server cannot take the connection), not a stall
    of a stream (read_timeout)."""
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(0)  # never accepted
    port = lsock.getsockname()[1]
    fillers = []
    try:
        for _ in range(4):  # fill the accept queue (listen(0) holds about one)
            f = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            f.setblocking(False)
            f.connect_ex(("127.0.0.1", port))
            fillers.append(f)
        time.sleep(0.1)
        client = StreamClient(f"http://127.0.0.1:{port}", connect_timeout_s=0.5, read_timeout_s=5)
        t0 = time.perf_counter()
        result, _ = client.stream("/v1/completions", b"{}", RequestRecord(t0, 4, "completions"))
        took = time.perf_counter() - t0
        client.close()
    finally:
        for f in fillers:
            f.close()
        lsock.close()
    assert result.error_kind == errors.CONNECT_FAILED, result
    assert result.error_message == "connect timed out" and took < 3
