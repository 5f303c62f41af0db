"""A tiny TLS server for tests, as its own process: ``python -m tests.support.tlsserver CERT KEY``.

Listens on 127.0.0.1 (a free port, printed as ``TLS_LISTENING <port>``), completes the TLS handshake
of every connection and answers each request with a JSON 404; a plain-HTTP request fails its
handshake and is closed, as OpenSSL-based servers (uvicorn, vLLM with --ssl-certfile) do. Its own
process: a gevent TLS server in the test's process does not complete a handshake with a gevent
client in the same hub. ``tls_server`` starts and stops it; ``self_signed_cert`` (openssl command)
makes its certificate (``cert_or_skip`` for a fixture).
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.procs import stop_process

READY = "TLS_LISTENING "
ANSWER = b'HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}'


def self_signed_cert(directory: Path) -> tuple[Path, Path] | None:
    """(certificate, key) files for 127.0.0.1 made with the openssl command, None without it."""
    if shutil.which("openssl") is None:
        return None
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=60)
    return cert, key


def cert_or_skip(tmp_path_factory) -> tuple[Path, Path]:
    """A module fixture's (certificate, key): ``self_signed_cert`` in a fresh directory, or the test
    skipped without the openssl command."""
    files = self_signed_cert(tmp_path_factory.mktemp("tls"))
    if files is None:
        pytest.skip("no openssl command to make a test certificate")
    return files


@contextmanager
def tls_server(cert: Path, key: Path):
    """Yields the https:// URL of a running ``python -m tests.support.tlsserver``; stops it afterwards."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.tlsserver", str(cert), str(key)],
                            cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # the server prints it once listening, or exits
        assert line.startswith(READY), f"tests.support.tlsserver did not start (exit code {proc.poll()})"
        yield f"https://127.0.0.1:{int(line[len(READY):])}"
    finally:
        stop_process(proc)


def _serve(conn: socket.socket, context: ssl.SSLContext) -> None:
    conn.settimeout(10)
    try:
        with context.wrap_socket(conn, server_side=True) as tls:
            while tls.recv(65536):
                tls.sendall(ANSWER)
                break
    except OSError:  # a plain-HTTP request (ssl.SSLError), a client that went away
        pass
    finally:
        conn.close()


def main(cert: str, key: str) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        print(READY + str(listener.getsockname()[1]), flush=True)
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=_serve, args=(conn, context), daemon=True).start()


if __name__ == "__main__":
    main(*sys.argv[1:3])
