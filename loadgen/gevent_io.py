"""How loadgen.client drives geventhttpclient's sockets: the pool's two adaptations and body reads.

Used by loadgen.client only (which translates every exception raised here into a RequestError).

- ``adapt_pool``: connect failures are tagged (``ConnectError``) so a connect timeout is told apart
  from a read timeout; the pool's check of a kept-alive socket before reuse does not yield.
  geventhttpclient checks with ``select.select([sock], [], [], 0.0)``, which Locust's monkey-patching
  makes gevent's select, and that calls ``gevent.sleep(0)`` even with timeout 0: every request
  went to the back of the event loop's queue between its send time (``record.sent_s``) and its send,
  so the loop's whole turn was counted in TTFT. The original select answers the same question.
- ``read_available``: the body bytes the socket has now, waiting (on the socket's read watcher,
  without a per-read timer) until at least one byte came. The read timeout of the body is the
  request's ``loadgen.deadline.IdleDeadline``.
- ``probe_scheme``: the start check's question whether the server speaks the URL's scheme (TLS or
  plain HTTP), on connections of its own, bounded by the connect timeout.
"""

from __future__ import annotations

import re
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


# -- the start check's scheme probe (loadgen.client.check_scheme) ---------------------------------
# A TLS client speaks first (its ClientHello), then waits for the ServerHello. A plain-HTTP server
# that reads a request head up to its blank line (the simulator, Python's http.server) never
# answers a ClientHello, which holds no blank line: the handshake waits the whole connect timeout.
# So once the handshake has gone unanswered for a grace (or failed), the server is asked a plain
# request on a second connection. A TLS server answers a ClientHello within about one round trip
# (the TCP connect's time) plus its signing; the grace is many of those, at least a second.
HANDSHAKE_GRACE_S = 1.0
GRACE_ROUND_TRIPS = 8
PLAIN_REQUEST = b"GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
_STATUS_LINE = re.compile(rb"HTTP/1\.[01] (\d{3})[ \r]")


class WrongScheme(Exception):
    """The server speaks the other protocol than the URL says: ``spoken`` is "http" (a plain-HTTP
    server behind an https:// URL) or "https"; ``evidence`` says what showed it."""

    def __init__(self, spoken: str, evidence: str):
        super().__init__(f"the server speaks {spoken}: {evidence}")
        self.spoken = spoken
        self.evidence = evidence


def handshake_grace_s(connect_s: float, timeout_s: float) -> float:
    """How long a TLS handshake may go unanswered before the plain-HTTP question is asked:
    min(timeout_s, max(HANDSHAKE_GRACE_S, GRACE_ROUND_TRIPS x connect_s)), where ``connect_s``,
    the TCP connect's time, is about one round trip."""
    return min(timeout_s, max(HANDSHAKE_GRACE_S, GRACE_ROUND_TRIPS * connect_s))


def http_status(first: bytes) -> int | None:
    """The status of an HTTP/1.x status line at the start of ``first`` (b"HTTP/1.1 404 ..." -> 404),
    None when the bytes are not one (a TLS record, nothing)."""
    match = _STATUS_LINE.match(first)
    return int(match.group(1)) if match else None


def _connect(address: tuple[str, int], timeout_s: float):
    try:
        return gevent.socket.create_connection(address, timeout=timeout_s)
    except OSError as exc:
        raise ConnectError(exc) from exc


def _handshake(sock, hostname: str, timeout_s: float) -> bool:
    """Whether a TLS handshake on ``sock`` completes within ``timeout_s``. Certificates are not
    checked: the question is only whether the server speaks TLS (the run's own client checks them)."""
    context = gevent.ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, gevent.ssl.CERT_NONE
    try:
        tls = context.wrap_socket(sock, server_hostname=hostname, do_handshake_on_connect=False)
    except OSError:
        return False
    try:
        tls.settimeout(timeout_s)
        tls.do_handshake()
        return True
    except OSError:  # unanswered (a timeout), refused (an SSL error), closed or reset
        return False
    finally:
        tls.close()


def _plain_status(address: tuple[str, int], host_header: str, timeout_s: float) -> int | None:
    """The HTTP status a plain request to ``address`` is answered with, None without one in time."""
    first = b""
    with gevent.Timeout(timeout_s, False):
        try:
            with gevent.socket.create_connection(address, timeout=timeout_s) as sock:
                sock.sendall(PLAIN_REQUEST % host_header.encode("idna"))
                while len(first) < 64 and b"\n" not in first:
                    more = sock.recv(64)
                    if not more:
                        break
                    first += more
        except OSError:
            pass
    return http_status(first)


def probe_scheme(hostname: str, port: int, host_header: str, tls: bool, timeout_s: float) -> None:
    """Raise WrongScheme when the server at (hostname, port) speaks the other protocol than ``tls``
    says; ConnectError when it cannot be reached within ``timeout_s``; return when it speaks
    ``tls``, or when nothing is proven. Takes at most ``timeout_s`` (two connects, one handshake).

    ``tls``: a handshake within the grace (``handshake_grace_s``) passes; otherwise a plain
    request answered with an HTTP status other than 400 proves a plain-HTTP server (400 is what
    TLS servers that recognise plain HTTP answer: nginx, Go). Not ``tls``: a handshake that
    completes within the grace proves a TLS server.
    """
    started = time.monotonic()
    sock = _connect((hostname, port), timeout_s)
    try:
        grace_s = handshake_grace_s(time.monotonic() - started, timeout_s)
        shook = _handshake(sock, hostname, grace_s)
    finally:
        sock.close()
    if shook != tls:
        if shook:
            raise WrongScheme("https", "it completed a TLS handshake")
        left_s = timeout_s - (time.monotonic() - started)
        status = _plain_status((hostname, port), host_header, left_s) if left_s > 0 else None
        if status is not None and status != 400:
            raise WrongScheme("http", f"it answered a plain request with HTTP {status}")
