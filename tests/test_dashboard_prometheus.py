"""Every query of the Grafana dashboard, run against a real Prometheus scraping real processes.

Data: two simulators (vLLM and SGLang flavors, with faults) serve real streams and their own
``/metrics``; a small threaded driver streams requests to them and records each one through the
real pipeline (SSEDecoder -> RequestRecord -> Collector); the exporter serves that Collector.
Prometheus scrapes the exporter (job ``llm-loadgen``) and both simulators (job ``llm-server``)
every second. The test fails if any dashboard expression errors or returns no data, and checks
that client latencies are those the fixed-timing simulators produce.

To reuse with another load source (e.g. a short locust run), keep the Prometheus part:
``PrometheusProcess`` + ``query_all_dashboard_exprs`` + ``problems`` from tests/promtools.py.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
from contextlib import ExitStack
from pathlib import Path

import pytest

from loadgen.errors import CONNECTION_RESET, HTTP_4XX, HTTP_5XX, OVERLOAD_429, OVERLOAD_503, RequestError
from loadgen.exporter import ExporterSnapshot, start_exporter
from loadgen.records import RequestRecord
from loadgen.sim_process import running_sim
from loadgen.sse import SSEDecoder
from loadgen.stats import Collector, StageStats
from tests.promtools import (
    PrometheusProcess,
    label_values,
    problems,
    prometheus_binary,
    query_all_dashboard_exprs,
    variable_queries,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(120),
    pytest.mark.skipif(prometheus_binary() is None,
                       reason="prometheus not installed: run scripts/ensure-prometheus.sh"),
]

DASHBOARD = Path(__file__).resolve().parent.parent / "grafana" / "dashboards" / "llm-loadgen.json"
VARIABLES = {"datasource": "prometheus", "loadgen_job": "llm-loadgen", "model": ".*",
             "server_job": "llm-server"}
MODEL = "llmsim-fixed"
OUT_TOKENS = 25
USERS_PER_SIM = 3
STAGE_S = 5.0  # the driver moves to the next "stage" every 5 s so the stage gauge changes
FAULTS = ("--fault-http-503", "0.05", "--fault-stream-error", "0.05", "--fault-truncate", "0.03")


class DriverSource:
    """Threads stream requests into one Collector; scrapes get a copy taken under the lock."""

    def __init__(self) -> None:
        self.collector = Collector()
        self.lock = threading.Lock()
        self.t0 = time.perf_counter()
        self.stop = threading.Event()
        self._cpu = (time.process_time(), time.perf_counter())

    def stage(self) -> int:
        return int((time.perf_counter() - self.t0) // STAGE_S)

    def exporter_snapshot(self) -> ExporterSnapshot:
        with self.lock:
            totals = StageStats()
            totals.merge(self.collector.totals)
            inflight = sum(self.collector.inflight.values())
        cpu, wall = time.process_time(), time.perf_counter()
        cpu_pct = 100.0 * (cpu - self._cpu[0]) / max(wall - self._cpu[1], 1e-9)
        self._cpu = (cpu, wall)
        t = time.perf_counter()
        time.sleep(0.001)  # how late a 1 ms sleep wakes: this process's scheduling lag
        lag = max(time.perf_counter() - t - 0.001, 0.0)
        users = 2 * USERS_PER_SIM
        return ExporterSnapshot(
            totals=totals, inflight=inflight, users=users, stage_index=self.stage(),
            target_concurrency=users, phase="measure", kv_projected_tokens=users * (8 + OUT_TOKENS),
            kv_capacity_tokens=1_000_000, guard_breaches=0, client_cpu_percent=cpu_pct,
            client_loop_lag_s=lag, model=MODEL, endpoint="/v1/completions", scenario="dashboard-test")

    def user(self, base_url: str) -> None:
        while not self.stop.is_set():
            self.one_request(base_url)

    def one_request(self, base_url: str) -> None:
        u = urllib.parse.urlsplit(base_url)
        stage = self.stage()
        rec = RequestRecord(time.perf_counter(), OUT_TOKENS, "/v1/completions")
        body = json.dumps({"model": MODEL, "prompt": "hello", "max_tokens": OUT_TOKENS,
                           "min_tokens": OUT_TOKENS, "ignore_eos": True, "stream": True,
                           "stream_options": {"include_usage": True}})
        with self.lock:
            self.collector.request_started(stage)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
        try:
            conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                resp.read()
                result = rec.fail(RequestError(_status_kind(resp.status), str(resp.status)),
                                  time.perf_counter())
            else:
                result = self._read_stream(resp, rec, stage)
        except (OSError, http.client.HTTPException) as exc:
            result = rec.fail(RequestError(CONNECTION_RESET, repr(exc)), time.perf_counter())
        finally:
            conn.close()
        with self.lock:
            self.collector.request_finished(stage)
            self.collector.record_result(result, stage, None, OUT_TOKENS)

    def _read_stream(self, resp, rec: RequestRecord, stage: int):
        decoder, seen = SSEDecoder(), 0
        while line := resp.readline():
            for payload in decoder.feed(line):
                try:
                    rec.on_payload(payload, time.perf_counter())
                except RequestError:
                    pass  # remembered by the record; finish() reports it
            if rec.chunk_tokens_seen > seen:
                with self.lock:
                    self.collector.add_window_tokens(stage, rec.chunk_tokens_seen - seen)
                seen = rec.chunk_tokens_seen
        for payload in decoder.flush():
            rec.on_payload(payload, time.perf_counter())
        return rec.finish(time.perf_counter(), eof=True)


def _status_kind(status: int) -> str:
    return {429: OVERLOAD_429, 503: OVERLOAD_503}.get(status, HTTP_4XX if status < 500 else HTTP_5XX)


def hostport(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc


@pytest.fixture(scope="module")
def live_prometheus():
    """Sims + driver + exporter + Prometheus, all stopped at teardown even on failure."""
    with ExitStack() as stack:
        vllm = stack.enter_context(running_sim("--preset", "fixed", "--flavor", "vllm", *FAULTS))
        sglang = stack.enter_context(running_sim("--preset", "fixed", "--flavor", "sglang",
                                                 "--tokens-per-chunk", "2", *FAULTS))
        source = DriverSource()
        exporter = start_exporter("127.0.0.1", 0, source)
        stack.callback(exporter.stop)
        threads = [threading.Thread(target=source.user, args=(sim.url,), daemon=True)
                   for sim in (vllm, sglang) for _ in range(USERS_PER_SIM)]
        stack.callback(lambda: [t.join(timeout=15) for t in threads])
        stack.callback(source.stop.set)
        for t in threads:
            t.start()
        prom = stack.enter_context(PrometheusProcess(
            {"llm-loadgen": [f"127.0.0.1:{exporter.port}"],
             "llm-server": [hostport(vllm.url), hostport(sglang.url)]}))
        # >= 8 scrapes of every target, so [5s] rates and the [30s] range have data
        resp = prom.wait_for('min(count_over_time(up{job=~"llm-.*"}[1m])) >= 8', timeout_s=30)
        assert resp["data"]["result"], f"targets not scraped: {prom.targets_health()}\n{prom.log_tail()}"
        yield prom, source


def test_every_dashboard_query_returns_data(live_prometheus):
    prom, _source = live_prometheus
    assert set(prom.targets_health().values()) == {"up"}, prom.targets_health()
    results = query_all_dashboard_exprs(prom.url, DASHBOARD, VARIABLES)
    assert len(results) >= 30
    assert problems(results) == {}


def test_variable_queries_find_the_default_values(live_prometheus):
    prom, _source = live_prometheus
    dashboard = json.loads(DASHBOARD.read_text())
    expected = {"loadgen_job": "llm-loadgen", "server_job": "llm-server", "model": MODEL}
    for name, q in variable_queries(dashboard).items():
        assert expected[name] in label_values(prom.url, q, VARIABLES), (name, q)


def test_client_figures_match_the_simulators(live_prometheus):
    """Fixed sims: TTFT 200 ms, 20 ms per token (SGLang flavor: 2 tokens per 40 ms chunk)."""
    prom, source = live_prometheus

    def scalar(expr: str) -> float:
        resp = prom.query(expr)
        assert resp["status"] == "success" and resp["data"]["result"], (expr, resp)
        return float(resp["data"]["result"][0]["value"][1])

    sel = '{job="llm-loadgen"}'
    ttft_p50 = scalar(f"histogram_quantile(0.5, sum by (le) (rate(llm_loadgen_ttft_seconds_bucket{sel}[30s])))")
    itl_p50 = scalar(f"histogram_quantile(0.5, sum by (le) (rate(llm_loadgen_itl_seconds_bucket{sel}[30s])))")
    assert 0.19 <= ttft_p50 <= 0.4, ttft_p50
    assert 0.015 <= itl_p50 <= 0.04, itl_p50
    # SGLang sim: 2-token chunks every 40 ms, so mean chunk gap ~ 1.33 x mean per-token ITL (20 ms)
    mean = "sum(rate(llm_loadgen_{0}_seconds_sum{1}[30s])) / sum(rate(llm_loadgen_{0}_seconds_count{1}[30s]))"
    assert scalar(mean.format("itl_chunk", sel)) > 1.15 * scalar(mean.format("itl", sel))
    # faults were injected and counted by kind
    failed = scalar('sum(llm_loadgen_requests_total{job="llm-loadgen", outcome!="ok"})')
    assert failed > 0
    with source.lock:
        ok_now = source.collector.totals.requests_ok
    assert 0 < scalar('sum(llm_loadgen_requests_total{job="llm-loadgen", outcome="ok"})') <= ok_now
