"""Incremental Server-Sent Events decoder: bytes in, ``data`` payloads out. No I/O, no clock.

Follows the WHATWG event-stream rules that matter for OpenAI-compatible streams:

- lines end with LF, CR or CRLF, and a read may split anywhere, even between CR and LF;
- ``data:`` lines (with or without one space after the colon) accumulate; a blank line ends the
  event and its data lines are joined with ``\\n``;
- comment lines (``:...``) and the ``event``/``id``/``retry`` fields are skipped (we only need data);
- an event without data, or with empty data, is not returned;
- ``data: [DONE]`` is returned as the payload ``b"[DONE]"`` like any other;
- other lines are skipped too (WHATWG: unknown fields are ignored), but the first one is kept in
  ``foreign_line`` and ``events`` counts the payloads returned, so the client can tell a body that
  never was SSE (e.g. JSON lines without ``data:``) from an empty stream.

It is called per socket read on every stream, so it keeps only the incomplete tail between reads
(as a list of pieces, joined once when a line end arrives: no quadratic re-copying of a long line)
and works line by line with bytes methods, never byte by byte.
"""

from __future__ import annotations

from loadgen.errors import MALFORMED_CHUNK, RequestError

DEFAULT_MAX_LINE_BYTES = 1 << 20  # 1 MiB: far above any completion chunk, bounds a runaway line

_BOM = b"\xef\xbb\xbf"
_CR, _LF = 13, 10
_FIELDS = frozenset({b"event", b"id", b"retry"})  # SSE fields other than data


class SSEDecoder:
    """Feed bytes as they arrive; get back the ``data`` payload of every completed event.

    ``max_line_bytes`` bounds one line and one event's data; beyond it ``feed`` raises
    ``RequestError(MALFORMED_CHUNK)`` instead of buffering without limit.
    """

    __slots__ = ("max_line_bytes", "_pending", "_pending_len", "_data", "_data_len", "_skip_lf", "_started",
                 "events", "foreign_line")

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES):
        if max_line_bytes < 1:
            raise ValueError(f"max_line_bytes must be >= 1, got {max_line_bytes}")
        self.max_line_bytes = max_line_bytes
        self._pending: list[bytes] = []  # pieces of the incomplete last line
        self._pending_len = 0
        self._data: list[bytes] = []  # data lines of the event in progress
        self._data_len = 0
        self._skip_lf = False  # the previous read ended with CR: a leading LF belongs to it
        self._started = False
        self.events = 0  # payloads returned so far
        self.foreign_line: bytes | None = None  # the first line that is not an SSE field or comment

    def feed(self, data: bytes) -> list[bytes]:
        """Decode one read; return the payloads of the events it completed (often none or one)."""
        if not data:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if data[0] == _LF:
                data = data[1:]
        if _CR in data:  # int membership is a plain memchr, several times cheaper than b"\r" in data
            self._skip_lf = data.endswith(b"\r")
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = data.split(b"\n")
        before = self._pending_len
        if len(lines) == 1:  # no line end yet: keep the piece, join it when the line completes
            if data:
                self._pending.append(data)
                self._pending_len = before + len(data)
                if self._pending_len > self.max_line_bytes:
                    self._too_long(self._pending_len)
            return []
        if self._pending:  # join only the first line with the pieces before it
            self._pending.append(lines[0])
            lines[0] = b"".join(self._pending)
        tail = lines.pop()
        self._pending = [tail] if tail else []
        self._pending_len = len(tail)
        if before + len(data) > self.max_line_bytes:  # only then can a line be too long: check each
            for line in (*lines, tail):
                if len(line) > self.max_line_bytes:
                    self._too_long(len(line))
        return self._lines(lines)

    def flush(self) -> list[bytes]:
        """End of stream: return the last event if it lacked its closing blank line."""
        lines = [b"".join(self._pending), b""] if self._pending else [b""]
        self._pending = []
        self._pending_len = 0
        self._skip_lf = False
        return self._lines(lines)

    def _lines(self, lines: list[bytes]) -> list[bytes]:
        out: list[bytes] = []
        data = self._data
        if not self._started:  # the stream's first complete line: drop a UTF-8 byte order mark
            self._started = True
            if lines[0].startswith(_BOM):
                lines[0] = lines[0][3:]
        for line in lines:
            if not line:  # blank line: dispatch the event in progress
                if data:
                    payload = data[0] if len(data) == 1 else b"\n".join(data)
                    if payload:
                        out.append(payload)
                    data = []
                continue
            if line.startswith(b"data:"):
                data.append(line[6:] if line.startswith(b" ", 5) else line[5:])
            elif line == b"data":  # a field name without a colon has an empty value
                data.append(b"")
            else:  # a comment (":..."), a field we do not use (event, id, retry), or not SSE at all
                if self.foreign_line is None and line[0] != 58 and line.partition(b":")[0] not in _FIELDS:  # 58 ":"
                    self.foreign_line = line[:120]
                continue
            if len(data) > 1:
                self._grow(data)
        self._data = data
        self.events += len(out)
        return out

    def _grow(self, data: list[bytes]) -> None:
        """Bound a multi-line event: its joined size, counted incrementally (linear, not quadratic)."""
        size = len(data[0]) if len(data) == 2 else self._data_len
        self._data_len = size + 1 + len(data[-1])
        if self._data_len > self.max_line_bytes:
            self._data = []
            self._too_long(self._data_len)

    def _too_long(self, n: int) -> None:
        raise RequestError(
            MALFORMED_CHUNK,
            f"SSE line or event of {n} bytes exceeds max_line_bytes={self.max_line_bytes}: the response "
            "is not a stream of SSE events (or raise max_line_bytes if the server sends huge events)",
        )
