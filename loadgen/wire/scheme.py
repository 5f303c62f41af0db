"""Does the server speak --host's scheme? The start check's question, asked on connections of its own.

An ``https://`` URL for a plain-HTTP server would otherwise wait the whole connect timeout in a
TLS handshake nobody answers, then say only "connect timed out"; an ``http://`` URL for a TLS
server gets a closed connection or bytes that are not HTTP. Each is told in one line, with the URL
to use instead:

- https://: a handshake answered within the grace (``gevent_io.handshake_answered``) passes;
  otherwise a plain request on a second connection (the one client, ``StreamClient``) answered
  with any HTTP status but 400 proves a plain-HTTP server. 400 proves nothing: nginx and Go answer
  plain HTTP on their TLS ports with it.
- http://: asked only after a request failed the way TLS servers refuse plain HTTP
  (``plain_http_refused``); a handshake that completes proves a TLS server.

Everything is bounded by the connect timeout. Errors are ``errors.py`` kinds (``SchemeMismatch``
is a CONNECT_FAILED).
"""

from __future__ import annotations

import time
from urllib.parse import urlsplit

from loadgen import errors
from loadgen.errors import RequestError, SchemeMismatch
from loadgen.wire.client import INVALID_HTTP, StreamClient, transport_failure
from loadgen.wire.gevent_io import ConnectError, handshake_answered


def plain_http_refused(exc: RequestError) -> bool:
    """Whether a failed plain-HTTP request failed the way a TLS server refuses one: it closed the
    connection (OpenSSL servers), answered bytes that are not HTTP (a TLS alert), or answered 400
    (nginx, Go: "plain HTTP request sent to an HTTPS port")."""
    return (exc.kind == errors.CONNECTION_RESET or exc.status == 400
            or (exc.kind == errors.NOT_OPENAI and exc.message == INVALID_HTTP))


def with_scheme(host: str, scheme: str) -> str:
    """``host`` with the other ``scheme`` and the same port, said when it was implicit
    (https://h -> http://h:443: the server that speaks plain HTTP listens on 443)."""
    parts = urlsplit(host)
    port = "" if parts.port else f":{443 if parts.scheme == 'https' else 80}"
    return parts._replace(scheme=scheme, netloc=parts.netloc + port).geturl()


def plain_status(url: str, timeout_s: float) -> int | None:
    """The HTTP status ``GET /`` at a plain ``url`` is answered with; None without an HTTP answer."""
    client = StreamClient(url, connect_timeout_s=timeout_s, read_timeout_s=timeout_s)
    try:
        client.get_text("/")
        return 200
    except RequestError as exc:
        return exc.status
    finally:
        client.close()


def check_scheme(host: str, timeout_s: float) -> RequestError | None:
    """A SchemeMismatch when the server at ``host`` speaks the other protocol, a CONNECT_FAILED
    RequestError when it cannot be reached, None when it speaks ``host``'s or nothing is proven.
    Takes at most about ``timeout_s`` (module docstring)."""
    parts = urlsplit(host)
    tls = parts.scheme == "https"
    started = time.monotonic()
    try:
        shook = handshake_answered(parts.hostname, parts.port or (443 if tls else 80), timeout_s)
    except ConnectError as exc:
        return transport_failure(exc, connected=False)
    if shook == tls:
        return None
    if shook:
        return SchemeMismatch("https", "the server speaks TLS, not plain HTTP (it completed a TLS handshake); "
                                       f"use --host {with_scheme(host, 'https')}")
    left_s = timeout_s - (time.monotonic() - started)
    status = plain_status(with_scheme(host, "http"), left_s) if left_s > 0 else None
    if status is None or status == 400:
        return None
    return SchemeMismatch("http", f"TLS handshake failed: the server speaks plain HTTP (it answered a plain "
                                  f"request with HTTP {status}); use --host {with_scheme(host, 'http')}")


def scheme_mismatch(host: str, timeout_s: float, failed: RequestError | None = None) -> RequestError | None:
    """The start check's use: before the first request (``failed`` None) an https:// URL is asked
    (a plain-HTTP server may never answer its handshake: any error found, a SchemeMismatch or
    CONNECT_FAILED, is returned); after a failed one an http:// URL is asked when the failure
    looks like a TLS server's (``plain_http_refused``), and only a SchemeMismatch is returned."""
    https = urlsplit(host).scheme == "https"
    if failed is None:
        return check_scheme(host, timeout_s) if https else None
    if https or not plain_http_refused(failed):
        return None
    found = check_scheme(host, timeout_s)
    return found if isinstance(found, SchemeMismatch) else None
