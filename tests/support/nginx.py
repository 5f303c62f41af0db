"""A real router for the replicas tests: Debian's nginx in front of simulator replicas, started by
the test (``running_nginx``) as a least-connections load balancer (``least_conn``) on a free
127.0.0.1 port, with streaming passed through (``proxy_buffering off``) and each response naming
the engine that served it in ``X-Upstream-Addr`` (nginx's ``$upstream_addr``). Installed by
``make system-tools`` (scripts/ensure-nginx.sh); a test skips with the reason when it is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.ports import free_port

UPSTREAM_HEADER = "X-Upstream-Addr"


def nginx_binary() -> str:
    """The nginx binary, or skip the test naming how to get it."""
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
    if found is None:
        pytest.skip("nginx not installed: run `make system-tools` (scripts/ensure-nginx.sh, Debian's nginx)")
    return found


def nginx_conf(prefix: Path, port: int, backends: list[str]) -> str:
    """The whole nginx.conf: one upstream of ``backends`` (``host:port``) under least_conn."""
    servers = "\n".join(f"    server {b} max_fails=0;" for b in backends)
    user = "user root root;\n" if os.geteuid() == 0 else ""  # as root, workers would run as nobody
    temps = "\n".join(f"  {name}_temp_path {prefix}/{name};" for name in ("client_body", "proxy", "fastcgi",
                                                                          "uwsgi", "scgi"))
    return f"""{user}worker_processes 1;
error_log {prefix}/error.log warn;
pid {prefix}/nginx.pid;
events {{ worker_connections 4096; }}
http {{
  access_log off;
{temps}
  upstream engines {{
    least_conn;
{servers}
    keepalive 64;
  }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://engines;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 300s;
      add_header {UPSTREAM_HEADER} $upstream_addr always;
    }}
  }}
}}
"""


@contextmanager
def running_nginx(backends: list[str]):
    """nginx routing to ``backends`` (``host:port``); yields its URL. Stopped (its own pid) at exit."""
    binary = nginx_binary()
    with tempfile.TemporaryDirectory(prefix="nginx-") as tmp:
        prefix, port = Path(tmp), free_port()
        (prefix / "nginx.conf").write_text(nginx_conf(prefix, port, backends))
        proc = subprocess.Popen([binary, "-p", str(prefix), "-c", str(prefix / "nginx.conf"), "-g", "daemon off;"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_ready(proc, url, prefix)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_ready(proc: subprocess.Popen, url: str, prefix: Path, timeout_s: float = 15.0) -> None:
    """Until GET /v1/models answers through nginx (a backend answered), or fail with its log."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log = (prefix / "error.log").read_text() if (prefix / "error.log").exists() else ""
            raise RuntimeError(f"nginx exited {proc.returncode}: {proc.stderr.read().decode()[-2000:]} {log[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nginx at {url} did not answer within {timeout_s:g} s")
