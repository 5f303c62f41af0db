"""Prometheus exporter: `/metrics` built at scrape time from the run's merged snapshot.

Runs in the process that owns the run (local runner or Locust master). At each scrape the collector
asks its ``source`` for an :class:`ExporterSnapshot` and turns it into metric families; nothing is
kept between scrapes, so there is no second copy of the statistics to drift from the truth and no
prometheus_client multiprocess mode (which cannot carry custom collectors).

Names: one prefix ``llm_loadgen_``, base units (seconds, tokens), ``_total`` on counters, no colons.
SLO (only in a run with objectives): counters ``slo_met_requests_total`` and
``slo_met_output_tokens_total`` (every request of the run: goodput is their ``rate()``), gauges
``slo_attainment_ratio`` (the latest stage with finished measured requests: the current one so far,
or the one before during a ramp and warmup; met / judged, 0-1) and
``slo_attainment_target_ratio`` (``slo.attainment``).

Labels: ``model``, ``endpoint``, ``scenario`` (bounded; never per request), plus ``outcome``/
``kind`` on the request counter, ``phase`` on the phase gauge, and on the figures of finished stages
(``loadgen.export.stage_gauges``: clocks, breakdown, the server's window figures, cost) the stage's
own ``stage``, ``concurrency`` and ``rate``: one series per finished stage, as many as the run's stages.

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
from loadgen.export.slice_gauges import slice_families
from loadgen.export.stage_gauges import stage_families
from loadgen.phases import Phase
from loadgen.stats import metrics

log = logging.getLogger(__name__)

PREFIX = "llm_loadgen_"
LABELS = ("model", "endpoint", "scenario")
PHASES = tuple(Phase)  # the phase gauge has one series per phase

# Exported histograms and counters, declared (name, edges, HELP with the formula) in loadgen.stats.metrics.
HISTOGRAMS = tuple(h for h in metrics.HISTOGRAMS if h.exporter)
COUNTERS = tuple(c for c in metrics.COUNTERS if c.exporter)
SLO_COUNTERS = tuple(c for c in metrics.SLO_COUNTS if c.exporter)  # of totals.slo (loadgen.slo.objectives)


@dataclass
class ExporterSnapshot:
    """What one scrape shows. ``totals`` is a StageStats holding every request since the start.

    Optional fields left as None are not exported (absent, rather than a misleading 0).
    ``totals`` must only ever grow: the local runner's or the master's ``Collector.totals``, never
    a worker's (``take_delta`` resets it, which Prometheus would read as counter resets). It must
    not be mutated while a scrape reads it; under gevent a scrape never yields, so passing the
    live object is safe there (from threads, pass a copy taken under a lock).
    """

    totals: Any  # loadgen.stats.stage_stats.StageStats
    inflight: int = 0
    users: int = 0
    stage_index: int | None = None
    target_concurrency: int | None = None
    offered_rate_per_s: float | None = None  # open loop: the current stage's offered rate
    phase: str = "idle"  # one of PHASES
    kv_projected_tokens: float | None = None
    kv_capacity_tokens: float | None = None
    guard_breaches: int = 0
    client_cpu_percent: float | None = None
    client_loop_lag_s: float | None = None
    slo_attainment_target: float | None = None  # None: no SLO objective, no SLO series
    slo_stage_attainment: float | None = None  # the current stage's, so far
    # the finished stages' rows (summary.json's stages), oldest first (loadgen.export.stage_gauges)
    stages: tuple[dict, ...] = ()
    latest_slice: dict | None = None  # a soak's latest closed time slice (loadgen.export.slice_gauges)
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
        yield from stage_families(snap.stages, LABELS, labels)
        yield from slice_families(snap.latest_slice, snap.stages, LABELS, labels)


def _counters(snap: ExporterSnapshot, labels: list[str]) -> Iterator[Any]:
    t = snap.totals
    for counter in COUNTERS:
        fam = CounterMetricFamily(f"{PREFIX}{counter.exporter}", counter.formula, labels=LABELS)
        fam.add_metric(labels, float(getattr(t, counter.attr)))
        yield fam
    if snap.slo_attainment_target is not None:
        for counter in SLO_COUNTERS:
            fam = CounterMetricFamily(f"{PREFIX}{counter.exporter}", counter.formula, labels=LABELS)
            fam.add_metric(labels, float(getattr(t.slo, counter.attr)))
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
    for h in HISTOGRAMS:
        hist = getattr(totals, h.attr)
        counts = hist.cumulative_le(h.edges)
        buckets = [(floatToGoString(e), float(c)) for e, c in zip(h.edges, counts, strict=True)]
        buckets.append(("+Inf", float(hist.count)))
        fam = HistogramMetricFamily(f"{PREFIX}{h.exporter}", h.formula, labels=LABELS)
        fam.add_metric(labels, buckets, float(hist.sum))
        yield fam


def _gauges(snap: ExporterSnapshot, labels: list[str]) -> Iterator[Any]:
    gauges = (
        ("inflight_requests", "Requests sent and not yet finished.", snap.inflight),
        ("users", "Locust users running (the concurrency actually applied).", snap.users),
        ("stage", "Index of the current stage (0-based).", snap.stage_index),
        ("target_concurrency", "Concurrency the current stage asks for.", snap.target_concurrency),
        ("offered_rate_requests_per_second", "Open loop: the request rate the current stage offers "
         "(arrivals scheduled per second, all processes).", snap.offered_rate_per_s),
        ("kv_projected_tokens", "KV tokens the guard projects for the current concurrency: "
         "concurrency * (input + output tokens per request) * (1 + margin).", snap.kv_projected_tokens),
        ("kv_capacity_tokens", "KV cache capacity of the server in tokens, as discovered.",
         snap.kv_capacity_tokens),
        ("client_cpu_percent", "CPU use of the load generator process(es), percent of one core.",
         snap.client_cpu_percent),
        ("client_loop_lag_seconds", "Event-loop lag of the load generator: how late a timer fired. "
         "Large values mean client-side timings are inflated.", snap.client_loop_lag_s),
        ("slo_attainment_ratio", "SLO attainment of the current stage so far (the previous one during a "
         "ramp and warmup): measured requests meeting every objective / measured requests (failed ones "
         "count against it), 0-1.", snap.slo_stage_attainment),
        ("slo_attainment_target_ratio", "The attainment a stage needs to pass the SLO (slo.attainment).",
         snap.slo_attainment_target),
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
    a greenlet with cooperative sockets, so it does not block the loop (tests/unit/export/test_exporter_gevent.py).
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
