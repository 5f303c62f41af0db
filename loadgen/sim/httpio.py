"""A minimal HTTP/1.1 request reader for the simulator: keep-alive, Content-Length or chunked bodies.

Just enough HTTP for OpenAI clients: requests are read in order, ``Expect: 100-continue`` is
answered, request trailers are skipped. It is much cheaper per request than a WSGI stack, which
matters when a single process serves a thousand streams.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_HEAD = 64 * 1024
MAX_BODY = 64 * 1024 * 1024


class HTTPError(Exception):
    """A request we cannot parse; answered with ``status`` and the connection is closed."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class HTTPRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


class RequestReader:
    """Reads successive requests from one connection."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = bytearray()

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        if not data:
            return False
        self.buf += data
        return True

    def read(self) -> HTTPRequest | None:
        """The next request, or None when the client closed the connection between requests."""
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(self.buf) > MAX_HEAD:
                raise HTTPError(400, f"request head larger than {MAX_HEAD} bytes")
            if not self._fill():
                if self.buf:
                    raise HTTPError(400, "connection closed inside a request head")
                return None
        head = bytes(self.buf[:end]).decode("latin-1")
        del self.buf[: end + 4]
        lines = head.split("\r\n")
        try:
            method, target, version = lines[0].split(" ", 2)
        except ValueError:
            raise HTTPError(400, f"bad request line {lines[0][:80]!r}") from None
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise HTTPError(400, f"bad header line {line[:80]!r}")
            headers[name.strip().lower()] = value.strip()
        conn = headers.get("connection", "").lower()
        keep_alive = "close" not in conn if version == "HTTP/1.1" else "keep-alive" in conn
        if headers.get("expect", "").lower() == "100-continue":  # curl does this for large bodies
            self.sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = self._read_chunked()
        else:
            body = self._read_exact(self._content_length(headers))
        return HTTPRequest(method.upper(), target.split("?", 1)[0], headers, body, keep_alive)

    @staticmethod
    def _content_length(headers: dict[str, str]) -> int:
        raw = headers.get("content-length", "0")
        try:
            n = int(raw)
        except ValueError:
            raise HTTPError(400, f"bad Content-Length {raw!r}") from None
        if n < 0 or n > MAX_BODY:
            raise HTTPError(413 if n > 0 else 400, f"Content-Length {n} out of range (max {MAX_BODY})")
        return n

    def _read_exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not self._fill():
                raise HTTPError(400, "connection closed inside a request body")
        body = bytes(self.buf[:n])
        del self.buf[:n]
        return body

    def _read_line(self) -> bytes:
        while (i := self.buf.find(b"\r\n")) < 0:
            if len(self.buf) > MAX_HEAD or not self._fill():
                raise HTTPError(400, "bad chunked request body")
        line = bytes(self.buf[:i])
        del self.buf[: i + 2]
        return line

    def _read_chunked(self) -> bytes:
        parts, total = [], 0
        while True:
            try:
                size = int(self._read_line().split(b";", 1)[0], 16)
            except ValueError:
                raise HTTPError(400, "bad chunk size in request body") from None
            if size == 0:
                while self._read_line():  # trailers, until the empty line
                    pass
                return b"".join(parts)
            total += size
            if total > MAX_BODY:
                raise HTTPError(413, f"request body larger than {MAX_BODY} bytes")
            parts.append(self._read_exact(size))
            self._read_exact(2)
