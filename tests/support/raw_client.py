"""A tiny raw-socket HTTP/1.1 client and process launcher for testing and benchmarking the simulator.

Deliberately independent of ``loadgen.wire.client``: the simulator's tests must not depend on the code
they are meant to check. Sockets are gevent's, so many streams can run concurrently in greenlets
(it also works from plain code without monkey-patching). Each SSE event is stamped with the
``perf_counter()`` of the ``recv`` that completed it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from gevent import socket


@dataclass
class Response:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    events: list[tuple[float, bytes]] = field(default_factory=list)  # (t, SSE data payload)
    body: bytes = b""  # non-streaming body
    t_sent: float = 0.0
    error: str | None = None  # "reset" | "timeout" | "eof" (closed before the body ended)
    complete: bool = False  # the HTTP body ended cleanly (chunked terminator / full length)
    closed: bool = False  # the server closed the connection after this response

    @property
    def done(self) -> bool:
        return any(p == b"[DONE]" for _, p in self.events)

    def json_events(self) -> list[dict]:
        """Every event but [DONE], parsed; raises ValueError on invalid JSON."""
        return [json.loads(p) for _, p in self.events if p != b"[DONE]"]

    def json(self) -> dict:
        return json.loads(self.body)


class Connection:
    """One keep-alive connection; ``request`` may be called again while ``resp.closed`` is False."""

    def __init__(self, url: str, timeout_s: float = 30.0):
        host, port = url.split("//", 1)[1].rstrip("/").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    def request(self, method: str, path: str, obj: object = None) -> Response:
        body = b"" if obj is None else json.dumps(obj).encode()
        resp = Response(t_sent=time.perf_counter())
        self.sock.sendall(b"%s %s HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n"
                          b"Accept-Encoding: identity\r\nContent-Length: %d\r\n\r\n%s"
                          % (method.encode(), path.encode(), len(body), body))
        try:
            self._read_response(resp)
        except ConnectionResetError:
            resp.error, resp.closed = "reset", True
        except TimeoutError:
            resp.error, resp.closed = "timeout", True
        except EOFError:
            resp.error, resp.closed = "eof", True
        return resp

    def _recv(self) -> float:
        data = self.sock.recv(262144)
        if not data:
            raise EOFError
        self.buf += data
        return time.perf_counter()

    def _read_response(self, resp: Response) -> None:
        while b"\r\n\r\n" not in self.buf:
            self._recv()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        resp.status = int(lines[0].split()[1])
        resp.headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
        resp.closed = resp.headers.get("connection", "").lower() == "close"
        if resp.headers.get("transfer-encoding") == "chunked":
            self._read_chunked(resp)
        else:
            n = int(resp.headers.get("content-length", "0"))
            while len(self.buf) < n:
                self._recv()
            resp.body, self.buf = self.buf[:n], self.buf[n:]
            resp.complete = True
        if resp.closed:
            self.close()

    def _read_chunked(self, resp: Response) -> None:
        sse, t = b"", time.perf_counter()
        while True:
            while b"\r\n" not in self.buf:
                t = self._recv()
            size_line, rest = self.buf.split(b"\r\n", 1)
            size = int(size_line, 16)
            while len(rest) < size + 2:
                t = self._recv()
                rest = self.buf.split(b"\r\n", 1)[1]
            sse += rest[:size]
            self.buf = rest[size + 2:]
            while b"\n\n" in sse:
                event, sse = sse.split(b"\n\n", 1)
                data = [ln[5:].lstrip(b" ") for ln in event.split(b"\n") if ln.startswith(b"data:")]
                if data:
                    resp.events.append((t, b"\n".join(data)))
            if size == 0:
                resp.complete = True
                if resp.headers.get("connection", "").lower() == "close":
                    resp.closed = True
                return


def request(url: str, method: str, path: str, obj: object = None, timeout_s: float = 30.0) -> Response:
    """One request on a fresh connection, closed afterwards."""
    conn = Connection(url, timeout_s)
    try:
        return conn.request(method, path, obj)
    finally:
        conn.close()
