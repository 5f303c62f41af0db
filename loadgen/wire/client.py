"""Streaming HTTP client: with its socket layer loadgen.wire.gevent_io, the only code that touches
sockets; the one place that translates transport errors.

One ``StreamClient`` per Locust user, one keep-alive connection each. A stream is read with
``read_available`` (loadgen.wire.gevent_io): whatever body bytes the socket has delivered, as soon as
they arrive. We do not use geventhttpclient's ``read(n)`` / ``iter_content(n)``, which wait for n
bytes and delayed the first event by seconds in Locust 2.47 (FIELD_NOTES); ``readline`` is on
time but copies per line.
Each read is timestamped with ``time.perf_counter()`` the moment ``recv`` returns, then decoded by
``SSEDecoder`` and interpreted by ``RequestRecord`` (pure code, below us).

The read timeout: sending and the response headers use the socket's own timeout (gevent arms a
timer per waiting ``recv``; a few per request). The body is read without it, and one
``IdleDeadline`` per request (loadgen.wire.deadline) raises ``read_timeout`` when no bytes came for
``read_timeout_s``: the same idle meaning, without a timer per chunk.

TLS (``https://``): every connection uses the process's one ``ssl.SSLContext`` (``loadgen.wire.tls``:
``--ca-cert``, ``--insecure``); a certificate that did not verify is a ``CertificateRejected``.
"""

from __future__ import annotations

import errno
import re
import socket
import ssl
import time
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

import gevent
import orjson
from geventhttpclient import HTTPClient
from geventhttpclient._parser import HTTPParseError
from geventhttpclient.response import HTTPConnectionClosed

from loadgen import errors
from loadgen.config.fields import Shown
from loadgen.errors import CertificateRejected, ConfigError, RequestError
from loadgen.stats.failures import excerpt, server_reason
from loadgen.stats.records import RequestRecord, RequestResult
from loadgen.wire import tls
from loadgen.wire.deadline import IdleDeadline, IdleTimeout
from loadgen.wire.endpoints import server_root
from loadgen.wire.gevent_io import (
    YIELD_AFTER_BYTES,
    Closed,
    ConnectError,
    adapt_pool,
    discard,
    read_available,
)
from loadgen.wire.sse import SSEDecoder

ERROR_BODY_BYTES = 64 * 1024

_RESET_ERRNOS = {errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED, errno.ENOTCONN}
_CONNECT_ERRNOS = {errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EADDRNOTAVAIL}
# How a kept-alive connection that the server had already closed fails before any response byte.
_STALE = (HTTPConnectionClosed, ConnectionResetError, BrokenPipeError)


BODY_EXCERPT_CHARS = 120  # of a non-JSON error body, in a message meant to be one line
# A path or method the server does not have, answered without a JSON error: no OpenAI API there
# (a static file server, a web page, a wrong base URL). A JSON 404 ("model does not exist") is not this.
NOT_OPENAI_STATUSES = frozenset({404, 405, 501})


def _is_json(body: bytes) -> bool:
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return True


def _http_failure(status: int, body: bytes) -> RequestError:
    """Map an HTTP status before the stream to a failure category, with the server's message.

    404/405/501 without a JSON body is NOT_OPENAI (``NOT_OPENAI_STATUSES``), with the status and at
    most BODY_EXCERPT_CHARS of the server's words (an HTML page: its title or text)."""
    reason = server_reason(body)
    if status in NOT_OPENAI_STATUSES and not _is_json(body):
        text = excerpt(reason, BODY_EXCERPT_CHARS)
        return RequestError(errors.NOT_OPENAI, f"HTTP {status}, not JSON" + (f" ({text})" if text else ""),
                            status=status)
    message = f"HTTP {status}: {excerpt(reason)}" if reason else f"HTTP {status}"
    if status == 429:
        kind = errors.OVERLOAD_429
    elif status == 503:
        kind = errors.OVERLOAD_503
    elif 400 <= status < 500:
        kind = errors.HTTP_4XX
    else:
        kind = errors.HTTP_5XX
    return RequestError(kind, message, status=status)


INVALID_HTTP = "invalid HTTP"  # the message of an answer that is not HTTP at all
_SSL_SOURCE = re.compile(r" \(_ssl\.c:\d+\)$")


def transport_failure(exc: BaseException, connected: bool) -> RequestError:
    """Translate a socket/parser exception into a failure category."""
    if isinstance(exc, ConnectError):
        if isinstance(exc.cause, ssl.SSLCertVerificationError):
            cause = exc.cause
            return CertificateRejected(tls.rejection(cause.verify_message or cause.reason or str(cause),
                                                     cause.verify_code, tls.settings().ca_cert))
        if isinstance(exc.cause, ssl.SSLError):  # incl. certificate errors; the text without "(_ssl.c:1006)"
            return RequestError(errors.CONNECT_FAILED, "TLS handshake failed: " + _SSL_SOURCE.sub("", exc.strerror))
        timed_out = isinstance(exc.cause, socket.timeout)
        return RequestError(errors.CONNECT_FAILED, "connect timed out" if timed_out else exc.strerror)
    if isinstance(exc, IdleTimeout):  # the body: the request's IdleDeadline
        return RequestError(errors.READ_TIMEOUT, str(exc))
    if isinstance(exc, socket.timeout | gevent.Timeout):  # sending or the headers: the socket's timeout
        return RequestError(errors.READ_TIMEOUT, "no bytes within the read timeout")
    if isinstance(exc, Closed):
        return RequestError(errors.CONNECTION_RESET, str(exc))
    if isinstance(exc, HTTPConnectionClosed):  # a parse "error" that is only the peer closing
        return RequestError(errors.CONNECTION_RESET, "connection closed before the response")
    if isinstance(exc, HTTPParseError):
        return RequestError(errors.NOT_OPENAI if not connected else errors.CONNECTION_RESET, INVALID_HTTP)
    if isinstance(exc, OSError):
        if exc.errno in _CONNECT_ERRNOS or isinstance(exc, socket.gaierror):
            return RequestError(errors.CONNECT_FAILED, exc.strerror or str(exc))
        if exc.errno in _RESET_ERRNOS or isinstance(exc, ConnectionError):
            return RequestError(errors.CONNECTION_RESET, exc.strerror or str(exc))
        return RequestError(errors.CONNECTION_RESET, str(exc)[:200])
    raise exc


def check_host(host: str | None) -> str:
    """``host`` if it is an http(s) base URL with a host name (what this client can talk to), else
    ConfigError naming the fix. The one rule for --host: the start check and every client use it."""
    fix = "pass the server's base URL, e.g. --host http://127.0.0.1:8000"
    if not host:
        raise ConfigError("--host", Shown("nothing"), "a target server is required", fix)
    parts = urlsplit(host)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError("--host", host, "must be an http:// or https:// URL with a host name", fix)
    try:
        parts.port  # noqa: B018 -- urlsplit checks the port only when asked
    except ValueError:
        raise ConfigError("--host", host, "the port must be a number from 0 to 65535", fix) from None
    return host


def _tls_options(base_url: str) -> dict:
    """geventhttpclient's options for an https:// URL: this process's one context (``loadgen.wire.tls``),
    not a context of the pool's own, which would read the system's CA bundle (~50 ms of CPU) for
    every client."""
    if urlsplit(base_url).scheme != "https":
        return {}
    context = tls.client_context()
    # the pool calls the factory with cafile=, ignored: the context holds its certificates already;
    # and sets the context's check_hostname to ``not insecure``: what it is already
    return {"ssl_context_factory": lambda cafile=None: context, "insecure": not context.check_hostname}


class StreamClient:
    """Streaming POSTs to one OpenAI-compatible server over a keep-alive connection."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 120.0,
        clock: Callable[[], float] = time.perf_counter,
        upstream_header: str | None = None,
    ):
        # behind a router: the response header naming the engine (replicas.upstream_header); the last
        # stream's value in ``upstream`` as soon as its headers arrive (loadgen.wire.replicas)
        self.upstream_header, self.upstream = upstream_header, None
        # the API paths (/v1/...) hang under --host's root, whichever way it was pasted (endpoints.server_root)
        self.base_path = urlsplit(server_root(check_host(base_url))).path
        self._clock = clock
        sent = {
            "Content-Type": "application/json",
            "Accept-Encoding": "identity",  # streams must not be buffered by a decompressor
        }
        if api_key:
            sent["Authorization"] = f"Bearer {api_key}"
        for name, value in (headers or {}).items():  # --header / request.headers: theirs win (any case)
            sent = {k: v for k, v in sent.items() if k.lower() != name.lower()}
            sent[name] = value
        self._http = HTTPClient.from_url(
            base_url,
            concurrency=1,
            connection_timeout=connect_timeout_s,
            network_timeout=read_timeout_s,
            headers=sent,
            **_tls_options(base_url),
        )
        adapt_pool(self._http._connection_pool)
        self._deadline = IdleDeadline(read_timeout_s, clock)
        self._pooled = False  # the last response left its connection in the pool for reuse

    def close(self) -> None:
        self._http.close()

    def _send(self, method: str, path: str, body: bytes, headers: Mapping[str, str] | None = None):
        """Send one request; once more on a new connection if a reused one was found closed.

        A server may close a keep-alive connection right after a complete response (an idle
        timeout, a stream it ended by closing). A closed-loop user sends its next request at once
        and can beat the server's FIN: the request meets a closed socket before any response
        byte. The server never read it, so it is sent again, once, on a fresh connection
        (geventhttpclient itself retries only idempotent methods). A fresh connection that fails
        the same way is a real failure.
        """
        reused, self._pooled = self._pooled, False
        # ``headers``: this request's own, laid over the client's by geventhttpclient
        try:
            return self._http.request(method, self.base_path + path, body=body, headers=headers)
        except _STALE:
            if not reused:
                raise
        return self._http.request(method, self.base_path + path, body=body, headers=headers)

    # -- plain calls (start check, server watch, chat calibration) --------------------------------
    def get_json(self, path: str) -> dict:
        return self._json("GET", path, None)

    def post_json(self, path: str, body: dict) -> dict:
        return self._json("POST", path, orjson.dumps(body))

    def get_text(self, path: str) -> str:
        """GET ``path`` and return the body as text (e.g. Prometheus ``/metrics``, not JSON).

        Raises RequestError (``status`` set for an HTTP answer other than 200)."""
        return self._call("GET", path, None)[1].decode("utf-8", "replace")

    def _call(self, method: str, path: str, body: bytes | None):
        """One complete request: (response, body bytes) of a 200 answer, else RequestError."""
        try:
            resp = self._send(method, path, body or b"")
            data = resp.read()
            self._pooled = not resp.should_close()
        except (OSError, HTTPParseError, gevent.Timeout, Closed) as exc:
            raise transport_failure(exc, connected=False) from None
        if resp.status_code != 200:
            raise _http_failure(resp.status_code, data)
        return resp, data

    def _json(self, method: str, path: str, body: bytes | None) -> dict:
        resp, data = self._call(method, path, body)
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            raise RequestError(errors.NOT_OPENAI, f"{method} {path} did not answer JSON "
                               f"(Content-Type {resp.get('content-type')!r})") from None

    # -- the streaming request -------------------------------------------------------------------
    def stream(
        self,
        path: str,
        body: bytes,
        record: RequestRecord,
        on_tokens: Callable[[int], None] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[RequestResult, int]:
        """POST ``body`` and feed the SSE stream into ``record``.

        ``record.sent_s`` must be the send time on the same clock. ``on_tokens(n)`` is called as
        tokens arrive (live throughput windows). ``headers``: this request's own (``x-request-id``),
        beside the client's. Returns the record's result and the bytes read.
        Never raises for a failed request: failures are in ``result.error_kind``.
        """
        clock, deadline = self._clock, self._deadline
        nbytes = 0
        resp = None
        failure: RequestError | None = None
        eof = False
        seen = 0
        t = record.sent_s
        try:
            self.upstream = None
            resp = self._send("POST", path, body, headers)
            t = clock()
            if self.upstream_header is not None:
                self.upstream = resp.get(self.upstream_header)
            if resp.status_code != 200:
                failure = _http_failure(resp.status_code, resp.read(ERROR_BODY_BYTES))
            elif "event-stream" not in (resp.get("content-type") or ""):
                failure = RequestError(
                    errors.NOT_OPENAI,
                    f"expected text/event-stream, got {resp.get('content-type')!r}",
                )
            else:
                decoder = SSEDecoder()
                deadline.start(t)
                # body bytes parsed with the headers came without our recv: more may be right behind
                buffered, wait_first = bool(resp._body_buffer), True
                while True:
                    data = read_available(resp, wait_first)
                    t = clock()
                    if not data:
                        eof = True
                        break
                    deadline.last_read_s = t
                    nbytes += len(data)
                    for payload in decoder.feed(data):
                        record.on_payload(payload, t)
                    if on_tokens is not None and record.chunk_tokens_seen != seen:
                        on_tokens(record.chunk_tokens_seen - seen)
                        seen = record.chunk_tokens_seen
                    big = len(data) >= YIELD_AFTER_BYTES
                    wait_first, buffered = not (big or buffered), False
                    if big:
                        gevent.sleep(0)
                for payload in decoder.flush():
                    record.on_payload(payload, t)
                if not decoder.events and decoder.foreign_line is not None:
                    raise RequestError(errors.MALFORMED_CHUNK, "the body is not an SSE stream (no `data:` "
                                       f"event; first line {decoder.foreign_line[:80]!r})")
        except RequestError as exc:  # raised by the decoder/record for malformed data
            failure, t = exc, clock()
        except (OSError, HTTPParseError, gevent.Timeout, Closed) as exc:
            failure, t = transport_failure(exc, connected=resp is not None), clock()
        finally:
            deadline.cancel()  # first: nothing below may be interrupted by it
            if on_tokens is not None and record.chunk_tokens_seen != seen:
                on_tokens(record.chunk_tokens_seen - seen)
            if resp is not None:
                if eof:
                    self._pooled = not resp.should_close()
                else:
                    discard(resp)
        if failure is not None:
            return record.fail(failure, t), nbytes
        return record.finish(t, eof=True), nbytes
