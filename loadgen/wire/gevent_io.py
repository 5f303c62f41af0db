"""How loadgen.wire.client drives geventhttpclient's sockets: the pool's two adaptations and body reads.

Used by loadgen.wire.client only (which translates every exception raised here into a RequestError).

- ``adapt_pool``: connect failures are tagged (``ConnectError``) so a connect timeout is told apart
  from a read timeout; the pool's check of a kept-alive socket before reuse does not yield.
  geventhttpclient checks with ``select.select([sock], [], [], 0.0)``, which Locust's monkey-patching
  makes gevent's select, and that calls ``gevent.sleep(0)`` even with timeout 0: every request
  went to the back of the event loop's queue between its send time (``record.sent_s``) and its send,
  so the loop's whole turn was counted in TTFT. The original select answers the same question.
- ``read_available``: the body bytes the socket has now, waiting (on the socket's read watcher,
  without a per-read timer) until at least one byte came; over TLS, the TLS session's bytes. The
  read timeout of the body is the request's ``loadgen.wire.deadline.IdleDeadline``.
- ``handshake_answered``: the start check's question whether the server speaks TLS, on a
  connection of its own, bounded by the connect timeout (loadgen.wire.scheme).
"""

from __future__ import annotations

import ssl
import time

import gevent
import gevent.socket
import gevent.ssl
from gevent import monkey

_select = monkey.get_original("select", "select")

# Large reads: at high token rates several events wait in the kernel buffer; one recv takes them all.
RECV_BYTES = 32 * 1024
# A read that tries recv first yields to other greenlets only when the kernel buffer is empty: a
# stream whose bytes keep arriving would parse its whole response in one turn while every other
# stream's first bytes wait to be stamped (bench: flood TTFT p50 15-38 ms). After a read this large
# we yield once, *before* the next read, so no timestamp is taken late, and then try recv first
# (more is likely waiting). After a smaller read the buffer is almost always empty (our recv took
# all there was): wait for readability first. Ordinary servers send ~1 event per read. The body
# bytes parsed with the headers did not come from our recv: the read after them tries recv first.
YIELD_AFTER_BYTES = 16 * 1024


class ConnectError(OSError):
    """Opening the connection failed (refused, unreachable, or no answer within the connect
    timeout: a server whose accept backlog is full drops the SYN). Raised by the pool's socket
    factory, so a timeout there is told apart from a read timeout on an open connection."""

    def __init__(self, cause: OSError):
        super().__init__(cause.errno, cause.strerror or str(cause) or type(cause).__name__)
        self.cause = cause


class Closed(Exception):
    """The peer closed the connection before the response body was complete."""


def is_idle_and_open(sock) -> bool:
    """A kept-alive socket may be reused: open, and nothing to read (a readable idle socket has
    the server's FIN or stray bytes). geventhttpclient's rule, asked without yielding."""
    try:
        if sock is None or sock.fileno() < 0:
            return False
        readable, _, _ = _select([sock], [], [], 0.0)
    except (OSError, ValueError):
        return False
    return not readable


def adapt_pool(pool) -> None:
    """Wrap ``pool._create_socket`` (geventhttpclient's one place that connects) to raise
    ConnectError, and replace its reuse check ``_is_socket_alive`` with ``is_idle_and_open``."""
    create = pool._create_socket

    def create_socket():
        try:
            return create()
        except OSError as exc:
            raise ConnectError(exc) from exc

    pool._create_socket = create_socket
    pool._is_socket_alive = is_idle_and_open


def recv(sock, wait_first: bool) -> bytes:
    """One ``recv`` of up to RECV_BYTES on a gevent socket, without gevent's per-call timeout.

    gevent's ``sock.recv`` first tries the syscall; on EWOULDBLOCK (raised as an exception) it
    waits on the socket's read watcher inside a new ``Timeout`` (the socket's timeout). Here we
    wait on that same watcher with no timeout (the request's IdleDeadline is the timeout), then
    call the non-blocking recv of the underlying socket: with ``wait_first`` (the buffer is
    expected empty) no failed syscall and no exception per chunk. A wake-up without data waits again.
    """
    raw, ready = sock._sock, sock._read_event
    if ready is None:  # closed by another greenlet (Locust stopping the user)
        raise Closed("connection closed")
    sslobj = getattr(sock, "_sslobj", None)  # gevent's SSLSocket: its TLS session
    if sslobj is not None:
        return recv_tls(sock, sslobj, wait_first)
    if not wait_first:
        try:
            return raw.recv(RECV_BYTES)
        except BlockingIOError:
            pass
    wait = sock.hub.wait
    while True:
        wait(ready)
        try:
            return raw.recv(RECV_BYTES)
        except BlockingIOError:
            pass


def recv_tls(sock, sslobj, wait_first: bool) -> bytes:
    """``recv`` on a TLS socket: one read of the TLS session (``sslobj.read``, which does not block:
    gevent's socket is non-blocking), not of the raw socket, whose bytes are ciphertext. It waits
    on the read watcher while no whole record has come (``SSLWantReadError``), first only when
    the session holds no decrypted byte (``pending()``: a record already read may hold more than
    one read takes). A peer that closed without TLS's close_notify (most servers) ends the bytes
    (b""), as ssl's default ``suppress_ragged_eofs`` says."""
    wait = sock.hub.wait
    if wait_first and not sslobj.pending():
        wait(sock._read_event)
    while True:
        try:
            return sslobj.read(RECV_BYTES)
        except ssl.SSLWantReadError:
            wait(sock._read_event)
        except ssl.SSLWantWriteError:  # the session must send first (a TLS 1.3 key update)
            wait(sock._write_event)
        except ssl.SSLEOFError:
            return b""


def read_available(resp, wait_first: bool = True) -> bytes:
    """Return the body bytes available now, waiting only until at least one byte has arrived.

    Returns b"" at the end of the body. Feeds raw socket bytes through the response's HTTP parser
    (which undoes chunked framing into ``_body_buffer``) and hands over the whole buffer at once.
    ``wait_first``: see ``recv`` (False after a large read, when more bytes are likely waiting).
    """
    buf = resp._body_buffer
    while not buf:
        if resp.message_complete:
            return b""
        sock = resp._sock
        if sock is None:
            raise Closed("connection closed")
        data = recv(sock, wait_first)
        resp.feed(data)
        if not data:
            if resp.message_complete or buf:
                break
            raise Closed("connection closed mid-stream")
    out = bytes(buf)
    del buf[:]
    return out


def discard(resp) -> None:
    """Close the response's connection instead of returning it to the pool (body not consumed)."""
    sock, pool = resp._sock, getattr(resp, "_pool", None)
    resp._sock = None
    if sock is not None:
        if pool is not None:
            resp._pool = None
            pool.release_socket(sock)
        else:
            sock.close()


# -- the start check's TLS question (loadgen.wire.scheme) ------------------------------------------------
# A TLS client speaks first (its ClientHello), then waits for the ServerHello. A plain-HTTP server
# that reads a request head up to its blank line (the simulator, Python's http.server) never
# answers a ClientHello, which holds no blank line: the handshake would wait the whole connect
# timeout. A TLS server answers within about one round trip (the TCP connect's time) plus its
# signing; the grace is many of those, at least a second.
HANDSHAKE_GRACE_S = 1.0
GRACE_ROUND_TRIPS = 8


def handshake_grace_s(connect_s: float, timeout_s: float) -> float:
    """How long a TLS handshake may go unanswered: min(timeout_s, max(HANDSHAKE_GRACE_S,
    GRACE_ROUND_TRIPS x connect_s)), where ``connect_s``, the TCP connect's time, is about one
    round trip."""
    return min(timeout_s, max(HANDSHAKE_GRACE_S, GRACE_ROUND_TRIPS * connect_s))


def handshake_answered(hostname: str, port: int, timeout_s: float) -> bool:
    """Whether a TLS handshake with (hostname, port) completes within ``handshake_grace_s`` on a
    connection of its own; ConnectError when the TCP connect fails within ``timeout_s``.
    Certificates are not checked: the question is only whether the server speaks TLS (the run's
    own client checks them)."""
    started = time.monotonic()
    try:
        sock = gevent.socket.create_connection((hostname, port), timeout=timeout_s)
    except OSError as exc:
        raise ConnectError(exc) from exc
    context = gevent.ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, gevent.ssl.CERT_NONE
    tls = None
    try:
        tls = context.wrap_socket(sock, server_hostname=hostname, do_handshake_on_connect=False)
        tls.settimeout(handshake_grace_s(time.monotonic() - started, timeout_s))
        tls.do_handshake()
        return True
    except OSError:  # unanswered (a timeout), refused (an SSL error), closed or reset
        return False
    finally:
        (tls or sock).close()  # wrapping hands the connection to ``tls``
