"""TLS for the simulator (``--tls-cert CERT [--tls-key KEY]``): it then serves ``https://``, as a
server behind a private CA or with a self-signed certificate does.

- ``server_context``: the listening side's context from a PEM certificate chain and key (the key
  may be in the certificate's file); a file that does not load is a ``TLSFilesError``.
- ``handshake``: each connection's server-side handshake, in its own greenlet, bounded by the
  idle timeout. A client that gives up (it did not trust the certificate, it spoke plain HTTP)
  ends that connection quietly, as any TLS server does.
- ``write_now``: the runner's write that never waits (``loadgen.sim.stream``). A plain socket is
  written with one non-blocking ``os.write``. On a TLS socket the bytes must go through its TLS
  session: one TLS write, which OpenSSL does whole or not at all (Python does not enable partial
  writes), so it returns 0 when the socket buffer is full, the stream queues the bytes and its
  connection greenlet sends them with ``sendall`` (the retry OpenSSL requires: the same bytes
  first, the queue may have grown behind them).
"""

from __future__ import annotations

import functools
import os
import ssl
from collections.abc import Callable

import gevent.ssl


class TLSFilesError(Exception):
    """The certificate or key did not load; the message names the files and OpenSSL's reason."""


def server_context(cert: str, key: str | None) -> gevent.ssl.SSLContext:
    context = gevent.ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:  # missing file, not PEM, a key that does not match
        files = f"{cert}, {key}" if key else cert
        raise TLSFilesError(f"--tls-cert: cannot load the certificate and key from {files}: "
                            f"{exc.strerror or exc}") from None
    return context


def handshake(sock, context: gevent.ssl.SSLContext, timeout_s: float):
    """The TLS socket over ``sock`` (a gevent socket just accepted), or None when the handshake
    failed or took longer than ``timeout_s`` (``sock`` is closed then)."""
    sock.settimeout(timeout_s)
    try:
        return context.wrap_socket(sock, server_side=True)
    except OSError:  # ssl.SSLError, a timeout, a reset
        sock.close()
        return None


def write_now(sock) -> Callable[[bytes], int]:
    """A function writing bytes to ``sock`` without waiting: how many it wrote (0 when the socket
    buffer is full); raises OSError when the client is gone. See the module docstring."""
    sslobj = getattr(sock, "_sslobj", None)  # gevent's SSLSocket keeps its TLS session here
    if sslobj is None:
        return functools.partial(os.write, sock.fileno())

    def write(data: bytes) -> int:
        try:
            return sslobj.write(data)
        except (ssl.SSLWantWriteError, ssl.SSLWantReadError):
            return 0

    return write
