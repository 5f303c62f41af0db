"""Prometheus exporter: `/metrics` built at scrape time from the run's merged snapshot.

Runs in the process that owns the run (local runner or Locust master). At each scrape the collector
asks its ``source`` for an :class:`ExporterSnapshot` and turns it into metric families; nothing is
kept between scrapes, so there is no second copy of the statistics to drift from the truth and no
prometheus_client multiprocess mode (which cannot carry custom collectors).

Names: one prefix ``llm_loadgen_``, base units (seconds, tokens), ``_total`` on counters, no colons.
Labels: ``model``, ``endpoint``, ``scenario`` only (bounded; never per request), plus ``outcome``/
``kind`` on the request counter and ``phase`` on the phase gauge.

Counters are cumulative by construction: ``Collector.totals`` only ever grows (every merge adds), so
a later scrape never reports less than an earlier one.

Histograms: ``_sum`` and ``_count`` are the exact sum and count of the samples; the ``le`` bucket
counts come from ``LogHistogram.cumulative_le(edges)``, which counts the fine log buckets (100 per
decade, each 10^(1/100) ~ 2.3% wide) whose upper bound is <= the edge: exact for edges on a decade
(1 ms, 10 ms, 0.1 s, 1 s ...); for other edges a sample less than one fine bucket (< 2.3%, about 1%
on average) below the edge may be counted above it. Each count is a sum of fixed fine buckets, so
buckets never decrease between scrapes either. The edges contain vLLM's and SGLang's default server
bucket edges so client and server panels can be compared.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import CollectorRegistry
from prometheus_client.utils import floatToGoString

from loadgen.errors import FAILURE_KINDS, OVERLOAD_KINDS, ConfigError
from loadgen.phases import Phase

log = logging.getLogger(__name__)

PREFIX = "llm_loadgen_"
LABELS = ("model", "endpoint", "scenario")
PHASES = tuple(Phase)  # the phase gauge has one series per phase

# Default server bucket edges (seconds), read from vLLM v1 `PrometheusStatLogger` and SGLang
# `TokenizerMetricsCollector`. Including them makes `le` boundaries line up with the server panels.
VLLM_TTFT_EDGES = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                   7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
VLLM_ITL_EDGES = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                  10.0, 20.0, 40.0, 80.0)  # inter_token_latency and time_per_output_token
VLLM_E2E_EDGES = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                  120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
SGLANG_TTFT_EDGES = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
SGLANG_ITL_EDGES = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
                    0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0)
SGLANG_E2E_EDGES = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600,
                    1200, 1800, 2400)


def log_grid(lo: float, hi: float, mantissas=(1, 2, 3, 5, 7.5)) -> list[float]:
    """Edges m * 10^e in [lo, hi]: a ~1.5x step, dense enough for histogram_quantile interpolation."""
    out, exp = [], -9
    while 10.0**exp <= hi:
        out += [round(m * 10.0**exp, 9) for m in mantissas if lo <= m * 10.0**exp <= hi]
        exp += 1
    return out


def merge_edges(*groups) -> tuple[float, ...]:
    return tuple(sorted({round(float(e), 9) for g in groups for e in g}))


# ITL from 1 ms; TTFT from 1 ms to ~43 min; E2E to ~2 h (30 min soak requests and vLLM's 7680 s).
ITL_EDGES = merge_edges(log_grid(0.001, 60), VLLM_ITL_EDGES, SGLANG_ITL_EDGES)
TTFT_EDGES = merge_edges(log_grid(0.001, 1800), VLLM_TTFT_EDGES, SGLANG_TTFT_EDGES)
E2E_EDGES = merge_edges(log_grid(0.01, 1800), VLLM_E2E_EDGES, SGLANG_E2E_EDGES)

# (StageStats attribute, metric name, edges, HELP text with the formula). Successful requests only.
HISTOGRAMS = (
    ("ttft_s", "ttft_seconds", TTFT_EDGES,
     "Time to first token: t(first content chunk) - t(sent), one sample per request."),
    ("itl_token_s", "itl_seconds", ITL_EDGES,
     "Per-token inter-token latency: gap_i / n_i weighted by n_i (n_i = tokens in chunk i), one "
     "sample per token; compare with server ITL histograms."),
    ("itl_chunk_s", "itl_chunk_seconds", ITL_EDGES,
     "Per-chunk gap t(chunk i) - t(chunk i-1), one sample per chunk (vLLM-bench style ITL)."),
    ("tpot_s", "tpot_seconds", ITL_EDGES,
     "Time per output token per request: (E2E - TTFT) / (N - 1), N = completion tokens."),
    ("e2e_s", "e2e_seconds", E2E_EDGES,
     "End-to-end latency: t(last content chunk) - t(sent)."),
)


@dataclass
class ExporterSnapshot:
    """What one scrape shows. ``totals`` is a StageStats holding every request since the start.

    Optional fields left as None are not exported (absent, rather than a misleading 0).
    ``totals`` must only ever grow: the local runner's or the master's ``Collector.totals``, never
    a worker's (``take_delta`` resets it, which Prometheus would read as counter resets). It must
    not be mutated while a scrape reads it; under gevent a scrape never yields, so passing the
    live object is safe there (from threads, pass a copy taken under a lock).
    """

    totals: Any  # loadgen.stats.StageStats
    inflight: int = 0
    users: int = 0
    stage_index: int | None = None
    target_concurrency: int | None = None
    phase: str = "idle"  # one of PHASES
    kv_projected_tokens: float | None = None
    kv_capacity_tokens: float | None = None
    guard_breaches: int = 0
    client_cpu_percent: float | None = None
    client_loop_lag_s: float | None = None
    model: str = ""
    endpoint: str = ""
    scenario: str = ""


class ExporterSource(Protocol):
    def exporter_snapshot(self) -> ExporterSnapshot: ...


class LoadgenCollector:
    """prometheus_client custom collector: ``collect()`` yields families built from one snapshot."""

    def __init__(self, source: ExporterSource):
        self.source = source

    def collect(self) -> Iterator[Any]:
        snap = self.source.exporter_snapshot()
        labels = [snap.model, snap.endpoint, snap.scenario]
        yield from _counters(snap, labels)
        yield from _histograms(snap.totals, labels)
        yield from _gauges(snap, labels)


def _counters(snap: ExporterSnapshot, labels: list[str]) -> Iterator[Any]:
    t = snap.totals
    for attr, name, help_text in (
        ("input_tokens", "input_tokens",
         "Prompt tokens of successful requests (server usage, else expected)."),
        ("output_tokens", "output_tokens",
         "Completion tokens of successful requests (server usage, else counted chunks)."),
        ("failed_output_tokens", "failed_output_tokens",
         "Completion tokens received by requests that then failed."),
        # Counted as chunks arrive, not at request end: its rate stays smooth for long requests.
        ("window_output_tokens", "received_output_tokens",
         "Completion tokens of all requests, counted as their chunks arrive (per-chunk usage "
         "deltas, else 1 per content chunk)."),
    ):
        fam = CounterMetricFamily(f"{PREFIX}{name}", help_text, labels=LABELS)
        fam.add_metric(labels, float(getattr(t, attr)))
        yield fam
    fam = CounterMetricFamily(
        f"{PREFIX}requests", "Finished requests by outcome (ok|error|overload) and failure kind.",
        labels=LABELS + ("outcome", "kind"))
    fam.add_metric(labels + ["ok", "ok"], float(t.requests_ok))
    # Every known kind is exported from the start (at 0) so rate() sees each series begin at 0.
    kinds = list(FAILURE_KINDS) + sorted(set(t.errors) - set(FAILURE_KINDS))
    for kind in kinds:
        outcome = "overload" if kind in OVERLOAD_KINDS else "error"
        fam.add_metric(labels + [outcome, kind], float(t.errors.get(kind, 0)))
    yield fam
    fam = CounterMetricFamily(f"{PREFIX}guard_breaches",
                              "Times the KV guard saw projected tokens exceed capacity.", labels=LABELS)
    fam.add_metric(labels, float(snap.guard_breaches))
    yield fam


def _histograms(totals: Any, labels: list[str]) -> Iterator[Any]:
    for attr, name, edges, help_text in HISTOGRAMS:
        hist = getattr(totals, attr)
        counts = hist.cumulative_le(edges)
        buckets = [(floatToGoString(e), float(c)) for e, c in zip(edges, counts, strict=True)]
        buckets.append(("+Inf", float(hist.count)))
        fam = HistogramMetricFamily(f"{PREFIX}{name}", help_text, labels=LABELS)
        fam.add_metric(labels, buckets, float(hist.sum))
        yield fam


def _gauges(snap: ExporterSnapshot, labels: list[str]) -> Iterator[Any]:
    gauges = (
        ("inflight_requests", "Requests sent and not yet finished.", snap.inflight),
        ("users", "Locust users running (the concurrency actually applied).", snap.users),
        ("stage", "Index of the current stage (0-based).", snap.stage_index),
        ("target_concurrency", "Concurrency the current stage asks for.", snap.target_concurrency),
        ("kv_projected_tokens", "KV tokens the guard projects for the current concurrency: "
         "concurrency * (input + output tokens per request) * (1 + margin).", snap.kv_projected_tokens),
        ("kv_capacity_tokens", "KV cache capacity of the server in tokens, as discovered.",
         snap.kv_capacity_tokens),
        ("client_cpu_percent", "CPU use of the load generator process(es), percent of one core.",
         snap.client_cpu_percent),
        ("client_loop_lag_seconds", "Event-loop lag of the load generator: how late a timer fired. "
         "Large values mean client-side timings are inflated.", snap.client_loop_lag_s),
    )
    for name, help_text, value in gauges:
        if value is None:
            continue
        fam = GaugeMetricFamily(f"{PREFIX}{name}", help_text, labels=LABELS)
        fam.add_metric(labels, float(value))
        yield fam
    fam = GaugeMetricFamily(f"{PREFIX}phase", "1 for the current run phase, 0 for the others.",
                            labels=LABELS + ("phase",))
    for phase in PHASES:
        fam.add_metric(labels + [phase], 1.0 if snap.phase == phase else 0.0)
    yield fam


def make_registry(source: ExporterSource) -> CollectorRegistry:
    """A fresh registry holding only our collector (no process/GC/platform metrics)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LoadgenCollector(source))
    return registry


@dataclass
class ExporterHandle:
    host: str
    port: int  # the bound port (the real one when 0 was asked for)
    _server: Any
    _thread: Any

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def start_exporter(host: str, port: int, source: ExporterSource) -> ExporterHandle:
    """Serve `/metrics` on host:port in the background; port 0 binds a free port (see handle.port).

    prometheus_client's server runs in a daemon thread; under gevent monkey-patching that thread is
    a greenlet with cooperative sockets, so it does not block the loop (tests/test_exporter_gevent.py).
    """
    try:
        server, thread = start_http_server(port, addr=host, registry=make_registry(source))
    except OSError as exc:
        fix = "choose a free port, or 0 to turn the exporter off"
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError("exporter.port", port, f"{host}:{port} is already in use", fix) from exc
        raise ConfigError("exporter.port", port, f"cannot listen on {host}:{port}: {exc}", fix) from exc
    handle = ExporterHandle(host, server.server_port, server, thread)
    log.info("Prometheus exporter listening on %s", handle.url)
    return handle


def exporter_from_config(host: str, port: int, source: ExporterSource) -> ExporterHandle | None:
    """The config's rule: port 0 means the exporter is OFF (returns None)."""
    if not port:
        return None
    return start_exporter(host, port, source)
