"""A flood token source: nginx serving a pre-generated vLLM-shaped SSE body on 127.0.0.1.

nginx sends the whole stream the moment the request arrives (a static file, sendfile), so it
delivers millions of tokens per second and never limits a Python client: whatever rate the client
reaches is the client's own ceiling, and the true TTFT is ~0 (the first chunk leaves with the
headers). Used by bench/ingest.py.

    with running_flood(tokens=1000) as url: ...   # url = http://127.0.0.1:PORT

Routes: ``POST /v1/completions`` -> the SSE body (``text/event-stream``), ``GET /v1/models`` -> a
static model list. nginx's static handler refuses POST with 405; ``error_page 405 =200 $uri``
turns that into an internal GET of the same file with status 200 (nginx switches the method to GET
for error-page redirects and discards the request body, so keep-alive works).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import orjson

MODEL = "flood-model"
NGINX_CANDIDATES = ("nginx", "/usr/sbin/nginx")

CONF = """\
daemon off;
master_process off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    sendfile on;
    tcp_nodelay on;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
    client_max_body_size 16m;
    server {{
        listen 127.0.0.1:{port};
        root {dir}/www;
        location = /v1/completions {{
            types {{ }}
            default_type text/event-stream;
            error_page 405 =200 $uri;
        }}
        location = /v1/models {{
            types {{ }}
            default_type application/json;
        }}
    }}
}}
"""


def find_nginx() -> str | None:
    for name in NGINX_CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


def sse_body(tokens: int, prompt_tokens: int = 1000, continuous_usage: bool = True) -> bytes:
    """One vLLM /v1/completions stream: ``tokens`` one-token chunks (with cumulative usage when
    ``continuous_usage``, as vLLM sends for ``continuous_usage_stats``), the last one carrying
    finish_reason "length", the include_usage final chunk, and ``[DONE]``."""
    head = {"id": "cmpl-0123456789abcdef0123456789abcdef", "object": "text_completion",
            "created": 1767225600, "model": MODEL}
    out = []
    for i in range(1, tokens + 1):
        chunk = {**head, "choices": [{"index": 0, "text": f" w{i % 97}", "logprobs": None,
                                      "finish_reason": "length" if i == tokens else None,
                                      "stop_reason": None}]}
        if continuous_usage:
            chunk["usage"] = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + i,
                              "completion_tokens": i}
        out.append(b"data: " + orjson.dumps(chunk) + b"\n\n")
    usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + tokens,
             "completion_tokens": tokens}
    out.append(b"data: " + orjson.dumps({**head, "choices": [], "usage": usage}) + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def models_body(max_model_len: int = 32768) -> bytes:
    return orjson.dumps({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "flood",
                                                     "max_model_len": max_model_len}]})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"nginx exited with code {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nginx did not listen on 127.0.0.1:{port} within {timeout_s} s")


@contextmanager
def running_flood(tokens: int = 1000, prompt_tokens: int = 1000, continuous_usage: bool = True):
    """Start nginx serving the flood body; yield its base URL; always stop it and remove its files."""
    nginx = find_nginx()
    if nginx is None:
        raise RuntimeError("nginx not found: run `sh scripts/ensure-nginx.sh` (Debian: apt-get install nginx)")
    tmp = Path(tempfile.mkdtemp(prefix="llm-flood-"))
    proc = None
    try:
        (tmp / "www" / "v1").mkdir(parents=True)
        (tmp / "www" / "v1" / "completions").write_bytes(sse_body(tokens, prompt_tokens, continuous_usage))
        (tmp / "www" / "v1" / "models").write_bytes(models_body())
        for _ in range(5):  # the port may be taken between free_port() and nginx's bind: retry
            port = free_port()
            (tmp / "nginx.conf").write_text(CONF.format(dir=tmp, port=port))
            proc = subprocess.Popen([nginx, "-p", str(tmp), "-c", str(tmp / "nginx.conf")],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            try:
                _wait_listening(port, proc, 10.0)
                break
            except RuntimeError:
                _stop(proc)
                proc = None
        if proc is None:
            raise RuntimeError(f"nginx would not start; see {tmp}/error.log")
        yield f"http://127.0.0.1:{port}"
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGQUIT if os.name == "posix" else signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
