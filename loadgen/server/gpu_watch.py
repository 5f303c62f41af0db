"""The GPU watch: DCGM exporters' ``/metrics`` read at each window's edges and polled during it.

One exporter per node (``--gpu-metrics URL``, scenario key ``gpu_metrics``), read like the server
watch reads the server (``loadgen.server.watch``): once as a stage's window opens, every
``interval_s`` while it is open, once as it closes; the figures are ``loadgen.server.gpu_window``'s.
GPU telemetry is optional: an exporter that does not answer at the start, or has no DCGM GPU series,
is named in one warning and left out; the run goes on (without GPU figures if none answered). Every
request goes through ``StreamClient`` (gevent-native: a slow exporter yields, never blocks the loop).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from urllib.parse import urlsplit

import gevent

from loadgen.config.headers import url_shown
from loadgen.errors import ConfigError, RequestError
from loadgen.server.gpu_window import DCGM_NAMES, GpuReading, gpu_samples, window_gpu
from loadgen.server.replies import failure_text, parse_metrics
from loadgen.wire.client import StreamClient

log = logging.getLogger(__name__)


class Exporter:
    """One DCGM exporter: its URL and two clients (the polls', and the edge reads', so an edge
    never waits on a poll)."""

    def __init__(self, url: str, timeout_s: float):
        parts = urlsplit(url)
        self.url = url
        self.path = (parts.path or "/metrics") + (f"?{parts.query}" if parts.query else "")
        root = f"{parts.scheme}://{parts.netloc}"
        self.poll_client, self.edge_client = (
            StreamClient(root, connect_timeout_s=timeout_s, read_timeout_s=timeout_s) for _ in range(2))

    def get(self, client: StreamClient) -> tuple[str, str | None]:
        """(/metrics text, None), or ("", what failed)."""
        try:
            return client.get_text(self.path), None
        except RequestError as exc:
            return "", failure_text(exc)

    def close(self) -> None:
        self.poll_client.close()
        self.edge_client.close()


class GpuWatch:
    """Reads every exporter in ``urls`` per window; ``end_stage`` gives the stage's ``gpu`` object."""

    def __init__(self, urls: Sequence[str], interval_s: float = 2.0, timeout_s: float = 2.0,
                 clock=time.perf_counter, warn=log.warning):
        self.interval_s, self.clock, self.warn = interval_s, clock, warn
        self.exporters: list[Exporter] = []
        for url in urls:
            try:
                self.exporters.append(Exporter(url, timeout_s))
            except ConfigError as exc:  # a URL the client refuses (the scenario's check passed it)
                self.warn(f"GPU metrics: {url}: {exc}; going on without its GPUs' figures")
        self.read_errors = 0
        self._readings: list[GpuReading] | None = None  # the open window's reads (None: no window open)
        self._opened = False
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> GpuWatch | None:
        """Read every exporter once; warn naming each that does not answer or has no DCGM GPU
        series, and drop it. Returns self with the polling greenlet running, or None when no
        exporter is left (no GPU figures)."""
        kept = []
        for exporter in self.exporters:
            text, error = exporter.get(exporter.edge_client)
            if error is None and not gpu_samples(parse_metrics(text), 0):
                error = f"no DCGM GPU series in it ({', '.join(DCGM_NAMES)})"
            if error is None:
                kept.append(exporter)
            else:
                self.warn(f"GPU metrics: GET {url_shown(exporter.url)}: {error}; the run goes on without its GPUs' figures")
                exporter.close()
        self.exporters = kept
        if not kept:
            return None
        self._greenlet = gevent.spawn(self._run)
        return self

    def _run(self) -> None:
        while True:
            gevent.sleep(self.interval_s)
            if self._readings is not None:
                reading = self.read(poll=True)
                if reading is not None and self._readings is not None:
                    self._readings.append(reading)

    def read(self, poll: bool = False) -> GpuReading | None:
        """Every exporter read once, all at the same time (exporter k's GPUs keyed by k); ``t`` the
        middle of the reads. None when none answered; a failed read is counted in ``read_errors``."""
        t0, gpus, answered = self.clock(), {}, False
        jobs = [gevent.spawn(e.get, e.poll_client if poll else e.edge_client) for e in self.exporters]
        gevent.joinall(jobs)
        for k, job in enumerate(jobs):
            text, error = job.value if job.successful() else ("", repr(job.exception))
            if error is not None:
                self.read_errors += 1
                continue
            answered = True
            gpus.update(gpu_samples(parse_metrics(text), k))
        return GpuReading((t0 + self.clock()) / 2, gpus) if answered else None

    def begin_stage(self, index: int) -> None:
        self.read_errors = 0
        opened = self.read()
        self._opened = opened is not None
        self._readings = [opened] if opened is not None else []

    def end_stage(self, index: int) -> dict:
        """The stage's ``gpu`` object: ``window_gpu`` over the window's reads, ``exporters`` (how
        many were read) and ``read_errors`` (failed reads in the window). Without both edge reads
        the energy is unknown (it would cover less than the window): ``energy_j`` None."""
        closed = self.read()
        readings, self._readings = self._readings or [], None
        if closed is not None:
            readings.append(closed)
        out = window_gpu(readings)
        if not (self._opened and closed is not None):
            out.update(energy_j=None, energy_source=None)
        out.update(exporters=len(self.exporters), read_errors=self.read_errors)
        return out

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=True, timeout=5)
            self._greenlet = None
        for exporter in self.exporters:
            exporter.close()
