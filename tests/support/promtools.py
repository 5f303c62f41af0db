"""Test helpers: run a real Prometheus on 127.0.0.1 and evaluate a Grafana dashboard's queries in it.

``PrometheusProcess`` writes a temporary config scraping the given targets every second, starts
``prometheus`` on a free port with a temporary TSDB, waits until it is ready, and always kills it
on exit (use it as a context manager). ``query_all_dashboard_exprs`` runs every PromQL expression
of a dashboard JSON through ``/api/v1/query`` with Grafana's macros and the dashboard variables
replaced by concrete values; ``problems`` lists the ones that failed or returned no data.

Reusable for any data source: start the exporter (synthetic, simulator, or a real locust run),
point a PrometheusProcess at it, wait for samples, then query.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tests.support.ports import free_port
from tests.support.procs import stop_process

# Concrete values for Grafana's built-in macros (scrape interval 1 s: $__rate_interval >= 4 scrapes).
DEFAULT_MACROS = {"__rate_interval": "5s", "__interval": "2s", "__range": "30s",
                  "__range_s": "30", "__interval_ms": "2000"}



def prometheus_binary() -> str | None:
    return shutil.which("prometheus")


def http_get_json(url: str, timeout: float = 5.0) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:  # Prometheus answers 400/422 with a JSON error body
        return json.loads(exc.read() or b"{}")


class PrometheusProcess:
    """A throwaway Prometheus scraping ``targets`` = {job: ["127.0.0.1:port", ...]} every 1 s."""

    def __init__(self, targets: dict[str, list[str]], scrape_interval: str = "1s"):
        self.targets = targets
        self.scrape_interval = scrape_interval
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._tmp: tempfile.TemporaryDirectory | None = None
        self._proc: subprocess.Popen | None = None

    def config_text(self) -> str:
        jobs = [{"job_name": job, "static_configs": [{"targets": list(addrs)}]}
                for job, addrs in self.targets.items()]
        cfg = {"global": {"scrape_interval": self.scrape_interval,
                          "scrape_timeout": self.scrape_interval,
                          "evaluation_interval": self.scrape_interval},
               "scrape_configs": jobs}
        return json.dumps(cfg, indent=1)  # JSON is valid YAML

    def start(self, ready_timeout_s: float = 20.0) -> PrometheusProcess:
        binary = prometheus_binary()
        if binary is None:
            raise RuntimeError("prometheus not on PATH: run scripts/ensure-prometheus.sh")
        self._tmp = tempfile.TemporaryDirectory(prefix="llm-loadgen-prom-")
        tmp = Path(self._tmp.name)
        (tmp / "prometheus.yml").write_text(self.config_text())
        self._log = open(tmp / "prometheus.log", "wb")  # noqa: SIM115 - closed in stop()
        self._proc = subprocess.Popen(
            [binary, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + ready_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self._proc.returncode}: {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"prometheus not ready after {ready_timeout_s} s on {self.url}")

    def log_tail(self, n: int = 2000) -> str:
        if self._tmp is None:
            return ""
        path = Path(self._tmp.name) / "prometheus.log"
        return path.read_bytes()[-n:].decode(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        stop_process(self._proc)
        self._proc = None
        if self._tmp is not None:
            self._log.close()
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> PrometheusProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def query(self, expr: str) -> dict:
        return query(self.url, expr)

    def targets_health(self) -> dict[str, str]:
        return targets_health(self.url)

    def wait_for(self, expr: str, timeout_s: float = 20.0) -> dict:
        return wait_for(self.url, expr, timeout_s)


def query(prom_url: str, expr: str) -> dict:
    """Instant query at now; returns Prometheus' JSON response (status, data or error)."""
    return http_get_json(f"{prom_url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))


def targets_health(prom_url: str) -> dict[str, str]:
    """scrape URL -> "up" / "down" / "unknown" for every active target."""
    data = http_get_json(f"{prom_url}/api/v1/targets")
    return {t["scrapeUrl"]: t["health"] for t in data.get("data", {}).get("activeTargets", [])}


def wait_for(prom_url: str, expr: str, timeout_s: float = 20.0) -> dict:
    """Poll ``expr`` until it returns a non-empty result; returns the last response."""
    deadline = time.monotonic() + timeout_s
    while True:
        resp = query(prom_url, expr)
        if not result_problem(resp) or time.monotonic() > deadline:
            return resp
        time.sleep(0.5)


def substitute(expr: str, variables: dict[str, str], macros: dict[str, str] | None = None) -> str:
    """Replace ``$name``, ``${name}``, ``${name:fmt}`` and ``[[name]]`` as Grafana does (plain text)."""
    values = {**DEFAULT_MACROS, **(macros or {}), **variables}

    def repl(m: re.Match) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        if name not in values:
            raise KeyError(f"dashboard variable ${name} has no value in {sorted(values)}")
        return values[name]

    # Longest names first is implicit: \w+ is greedy, so $__range_s never matches $__range.
    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]", repl, expr)


def _walk_panels(panels: list) -> list[dict]:
    out = []
    for p in panels:
        out.append(p)
        out += _walk_panels(p.get("panels", []))  # collapsed rows keep children here
    return out


def dashboard_exprs(dashboard: dict) -> list[str]:
    """Every PromQL ``expr`` of every panel target, in dashboard order, without duplicates."""
    seen: dict[str, None] = {}
    for panel in _walk_panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            if target.get("expr"):
                seen.setdefault(target["expr"], None)
    return list(seen)


def variable_queries(dashboard: dict) -> dict[str, str]:
    """name -> query of each ``query``-type template variable (Grafana's label_values(...) form)."""
    out = {}
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            q = var.get("query")
            out[var["name"]] = q.get("query", "") if isinstance(q, dict) else q
    return out


def label_values(prom_url: str, query_text: str, variables: dict[str, str]) -> list[str]:
    """Evaluate Grafana's ``label_values(selector, label)`` through /api/v1/label/<label>/values."""
    m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\)\s*", query_text)
    if not m:
        raise ValueError(f"unsupported variable query {query_text!r}: expected label_values(...)")
    selector, label = substitute(m.group(1), variables), m.group(2)
    data = http_get_json(f"{prom_url}/api/v1/label/{label}/values?"
                         + urllib.parse.urlencode({"match[]": selector}))
    if data.get("status") != "success":
        raise ValueError(f"label_values({selector}, {label}) failed: {data.get('error')}")
    return data["data"]


def query_all_dashboard_exprs(prom_url: str, dashboard_path, variables: dict[str, str],
                              macros: dict[str, str] | None = None) -> dict[str, dict]:
    """Run every expression of the dashboard at ``dashboard_path``; original expr -> response JSON.

    ``variables`` gives each dashboard variable a concrete value (e.g. {"loadgen_job": "llm-loadgen",
    "model": ".*", "server_job": "llm-server"}); ``macros`` overrides DEFAULT_MACROS.
    """
    dashboard = json.loads(Path(dashboard_path).read_text())
    return {expr: query(prom_url, substitute(expr, variables, macros))
            for expr in dashboard_exprs(dashboard)}


def result_problem(resp: dict) -> str | None:
    """Why a query response is unusable for a panel: an error, no series, or only NaN values."""
    if resp.get("status") != "success":
        return f"error: {resp.get('errorType')}: {resp.get('error')}"
    data = resp["data"]
    result = data["result"]
    if data["resultType"] == "scalar":
        result = [{"value": result}]
    if not result:
        return "no data"
    values = [float(s["value"][1]) for s in result if "value" in s]
    if values and all(math.isnan(v) for v in values):
        return "only NaN (e.g. histogram_quantile over buckets with no new samples)"
    return None


def problems(results: dict[str, dict]) -> dict[str, str]:
    """expr -> problem for every expression whose response is unusable."""
    return {expr: p for expr, resp in results.items() if (p := result_problem(resp))}
