"""Per-request output: turns model events into bytes on one client socket, and injects faults.

Two greenlets touch a stream. The runner calls ``emit`` for every chunk and writes with a
non-blocking ``os.write`` (one syscall per chunk; the runner never waits on a socket, so one slow
client cannot stall the others; over TLS one TLS write, ``loadgen.sim.tls.write_now``). If the socket buffer is full, the rest is queued and the
connection's own greenlet (``wait_done``) flushes it with a blocking send. That greenlet also
performs the end of the stream: keep the connection, close it, reset it, or hold it (stall).
"""

from __future__ import annotations

import os
import socket
import struct
from collections import deque
from time import perf_counter

import gevent
from gevent import get_hub
from gevent.event import Event

from loadgen.engine_model.engine import SimRequest
from loadgen.sim import framing
from loadgen.sim.faults import MID_STREAM, FaultDraw
from loadgen.sim.tls import write_now
from loadgen.sim.tokens import generated_text

KEEP, CLOSE, RESET, STALL, BROKEN = "keep", "close", "reset", "stall", "broken"


class Stream:
    """The sink of one request. ``fmt`` is None for a non-streaming request (JSON at the end)."""

    def __init__(self, server, sock, req: SimRequest, fmt: framing.StreamFormat | None,
                 fault: FaultDraw | None, finish_reason: bytes, text_offset: int, t_arrival: float):
        self.server = server
        self.sock = sock
        self.fd = sock.fileno()
        self._write_now = write_now(sock)
        self.req = req
        self.fmt = fmt
        # Pre-stream faults were answered by the server; mid-stream ones need a stream.
        self.fault = fault if fmt is not None and fault is not None and fault.kind in MID_STREAM else None
        self.finish_reason = finish_reason
        self.text_offset = text_offset
        self.t_arrival = t_arrival
        self.t_last = 0.0
        self.t_first = 0.0
        self.sent = 0  # tokens handed to the client so far
        self.end: str | None = None
        self.faulted = False
        self.pending: list[bytes] = []
        self.blocked = False  # the connection greenlet owns the socket's write side
        self.done_event = Event()
        # --network-delay-ms: bytes held this long after the engine timed them (release time, data)
        self.delay_s = server.config.network_delay_ms / 1000
        self.delayed: deque[tuple[float, bytes]] = deque()
        self.sender: gevent.Greenlet | None = None

    # -- runner side -------------------------------------------------------------------------------
    def emit(self, n: int, done: bool, now: float) -> None:
        """Write the chunk of ``n`` new tokens (the last one if ``done``), or inject this request's fault."""
        if self.end is not None:
            return
        start, self.sent = self.sent, self.sent + n
        self._emit_bytes(start, n, done)
        if self.end == BROKEN:
            return  # nothing reached the client: count nothing
        m = self.server.metrics
        if start == 0:
            self.t_first = now
            m.first_chunk(now - self.t_arrival, self.req.prompt_tokens, n)
        else:
            m.next_chunk(now - self.t_last, n)
        self.t_last = now
        if done and self.end == KEEP and not self.faulted:
            scheduled = self.req.t_scheduled or self.t_arrival  # fixed timing: no queue
            m.request_done(scheduled - self.t_arrival, self.t_first - scheduled, now - self.t_first,
                           now - self.t_arrival)

    def _emit_bytes(self, start: int, n: int, done: bool) -> None:
        fmt = self.fmt
        if fmt is None:  # non-streaming: the connection greenlet writes the JSON at the end
            if done:
                self._finish(KEEP, b"")
            return
        if start == 0 and self.server.config.cache_report:
            fmt.cached_tokens = self.req.cached_tokens  # known once admitted (engine prefix cache)
        if fmt.reasoning_tokens > start:  # still thinking (the hot path skips this)
            text, reasoning = self._texts(start, n)
        else:
            text, reasoning = generated_text(self.text_offset, start, n), b""
        fault = self.fault
        if fault is not None and self.sent >= fault.at_token and (fault.kind != "no_done" or done):
            self.fault = None
            self._inject(fault.kind, text, done, reasoning)
        elif not done:
            self._write(framing.http_chunk(fmt.content_event(text, self.sent, None, reasoning)))
        else:
            self._emit_tail(fmt.content_event(text, self.sent, self.finish_reason, reasoning))

    def _texts(self, start: int, n: int) -> tuple[bytes, bytes]:
        """(answer text, thinking text) of tokens ``start .. start + n - 1``: the request's first
        ``fmt.reasoning_tokens`` tokens are thinking; called while start < that."""
        r = min(self.fmt.reasoning_tokens - start, n)
        answer = generated_text(self.text_offset, start + r, n - r) if n > r else b""
        return answer, generated_text(self.text_offset, start, r)

    def _inject(self, kind: str, text: bytes, done: bool, reasoning: bytes = b"") -> None:
        fmt, m = self.fmt, self.server.metrics
        m.faults[kind] += 1
        self.faulted = True
        content = fmt.content_event(text, self.sent, None, reasoning)
        if kind == "malformed":  # the stream goes on after one broken event
            self._write(framing.http_chunk(content + framing.MALFORMED_EVENT))
            if done:
                self._emit_tail()
            return
        self.server.runner.abort(self.req)
        if kind == "stream_error":
            err = fmt.error_event("simulated engine failure (fault stream_error)", "InternalServerError", 500)
            self._finish(KEEP, framing.http_chunk(content + err + framing.DONE_EVENT) + framing.LAST_CHUNK)
        elif kind == "abort":
            body = fmt.content_event(text, self.sent, b"abort", reasoning) + fmt.usage_event(self.sent)
            self._finish(KEEP, framing.http_chunk(body + framing.DONE_EVENT) + framing.LAST_CHUNK)
        elif kind == "truncate":
            self._finish(CLOSE, framing.http_chunk(content) + framing.LAST_CHUNK)
        elif kind == "no_done":
            body = fmt.content_event(text, self.sent, self.finish_reason, reasoning) + fmt.usage_event(self.sent)
            self._finish(CLOSE, framing.http_chunk(body) + framing.LAST_CHUNK)
        elif kind == "reset":
            self._finish(RESET, framing.http_chunk(content))
        else:  # stall
            self._finish(STALL, framing.http_chunk(content))

    def _emit_tail(self, last_content: bytes = b"") -> None:
        """Normal end: the last content (or an empty chunk with the finish reason), usage, [DONE]."""
        fmt = self.fmt
        last = last_content or fmt.content_event(b"", self.sent, self.finish_reason)
        tail = last + fmt.usage_event(self.sent) + framing.DONE_EVENT
        self._finish(KEEP, framing.http_chunk(tail) + framing.LAST_CHUNK)

    def _finish(self, end: str, data: bytes) -> None:
        if data:
            self._write(data)
        if self.end is None:
            self.end = end
            if end == KEEP and not self.faulted:
                self.server.metrics.requests_ok += 1
        self.done_event.set()

    def _write(self, data: bytes) -> None:
        if self.delay_s:  # a network between us and the client: after the metrics' clock
            self.delayed.append((perf_counter() + self.delay_s, data))
            if self.sender is None:
                self.sender = gevent.spawn(self._send_delayed)
            return
        self._write_out(data)

    def _send_delayed(self) -> None:
        """Write each held piece at its release time, in order; wake the connection greenlet when
        none is left (it waits for them before it ends the stream)."""
        while self.delayed and self.end != BROKEN:
            release_s, data = self.delayed[0]
            if (wait := release_s - perf_counter()) > 0:
                gevent.sleep(wait)
            self.delayed.popleft()
            self._write_out(data)
        self.delayed.clear()
        self.sender = None
        self.done_event.set()

    def _write_out(self, data: bytes) -> None:
        if self.blocked:
            self.pending.append(data)
            return
        try:
            n = self._write_now(data)
        except BlockingIOError:
            n = 0
        except OSError:  # the client went away: stop generating for it
            self.end = BROKEN
            self.server.runner.abort(self.req)
            self.done_event.set()
            return
        if n < len(data):
            self.blocked = True
            self.pending.append(data[n:])
            self.done_event.set()  # wake the connection greenlet to flush

    # -- connection greenlet side ------------------------------------------------------------------
    def wait_done(self, stall_max_s: float) -> str:
        """Block until the stream ended; flush what the runner queued. Returns how it ended."""
        watch = get_hub().loop.io(self.fd, 1)  # READ: notice a client that hangs up while we wait
        watch.start(self._on_readable, watch)
        try:
            while True:
                self.done_event.wait()
                self.done_event.clear()
                self.flush()
                if self.end is not None and (self.sender is None or self.end == BROKEN):
                    break
        finally:
            watch.stop()
            watch.close()
        if self.end == RESET:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif self.end == STALL:
            self._hold(stall_max_s)
        return self.end

    def _on_readable(self, watch) -> None:
        """Hub callback: EOF or an error from the client means it gave up; free the model's capacity.

        Real servers abort a request whose client disconnected, queued or not. Without this a
        queued or non-streaming request would only be noticed when a write fails.
        """
        watch.stop()
        probe = socket.socket(fileno=os.dup(self.fd))  # a raw, non-gevent view for a non-blocking peek
        try:
            gone = probe.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            watch.start(self._on_readable, watch)  # spurious wake-up: keep watching
            return
        except OSError:
            gone = True
        finally:
            probe.close()
        if gone and self.end is None:
            self.end = BROKEN
            self.server.runner.abort(self.req)
            self.done_event.set()

    def flush(self) -> None:
        """Send queued bytes with a blocking send; the runner queues behind us meanwhile."""
        self.blocked = True
        try:
            while self.pending:
                data = b"".join(self.pending)
                self.pending.clear()
                self.sock.sendall(data)
        except OSError:
            if self.end is None:
                self.server.runner.abort(self.req)
            self.end = BROKEN
            self.pending.clear()
        finally:
            self.blocked = False

    def _hold(self, stall_max_s: float) -> None:
        """A stall: keep the socket open, silent, until the client gives up or the cap passes."""
        self.sock.settimeout(stall_max_s)
        try:
            while self.sock.recv(65536):
                pass
        except OSError:  # includes socket.timeout
            pass
