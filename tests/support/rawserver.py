"""Hand-made HTTP servers for client tests: a handler writes raw bytes to the socket on cue.

Runs in the test's own gevent hub (the client uses gevent sockets too), on 127.0.0.1, port 0.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager

import gevent
import orjson
from gevent.server import StreamServer

SSE_HEADERS = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
    b"Connection: keep-alive\r\n\r\n"
)


def chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def event(obj) -> bytes:
    """One SSE event carrying a JSON object (or a raw string such as [DONE])."""
    payload = obj if isinstance(obj, bytes) else orjson.dumps(obj)
    return b"data: " + payload + b"\n\n"


def completion_chunk(text: str = "x", finish: str | None = None, usage: dict | None = None) -> dict:
    d = {"id": "c", "object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": finish}]}
    if usage is not None:
        d["usage"] = usage
    return d


def read_request(sock) -> bytes:
    """Read one request (headers + Content-Length body) from the socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        more = sock.recv(65536)
        if not more:
            return data
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


@contextmanager
def raw_server(handler: Callable):
    """Serve ``handler(sock)`` for every connection; yields the base URL."""

    def handle(sock, _addr):
        try:
            handler(sock)
        except OSError:
            pass
        finally:
            sock.close()

    server = StreamServer(("127.0.0.1", 0), handle)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.stop(timeout=1)


def stream_tokens(sock, n: int, first_delay_s: float, gap_s: float, tokens_per_chunk: int = 1) -> None:
    """Answer one request with n tokens: headers now, first chunk after a delay, then gaps."""
    read_request(sock)
    sock.sendall(SSE_HEADERS)
    gevent.sleep(first_delay_s)
    sent = 0
    while sent < n:
        k = min(tokens_per_chunk, n - sent)
        sent += k
        finish = "length" if sent == n else None
        usage = {"prompt_tokens": 10, "completion_tokens": sent, "total_tokens": 10 + sent}
        sock.sendall(chunk(event(completion_chunk("tok " * k, finish, usage))))
        if sent < n:
            gevent.sleep(gap_s)
    sock.sendall(chunk(event(b"[DONE]")) + b"0\r\n\r\n")
