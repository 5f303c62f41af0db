"""The server watch: ``/metrics`` polled by a greenlet during the run, judged per stage.

All requests go through ``StreamClient`` (the one HTTP client; gevent-native, so a slow answer
yields instead of blocking the loop). Nothing here raises for an odd or unreachable server; it
reports what it tried instead. The judgment itself is pure: ``loadgen.server.overload``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

import gevent

from loadgen.errors import RequestError
from loadgen.server.overload import OverCapacityRule, StageWatch
from loadgen.server.replies import (
    WATCH_METRICS,
    failure_text,
    flavor_of,
    parse_metrics,
    watch_sample,
)
from loadgen.server.window import Edge, window_figures
from loadgen.server.window_spec import prefix_cache
from loadgen.wire.client import StreamClient
from loadgen.wire.endpoints import METRICS_PATH, server_root

log = logging.getLogger(__name__)


class ServerWatch:
    """A greenlet polling ``/metrics`` every ``interval_s`` into a StageWatch (see its rules).

    If the first poll finds no /metrics (error, or none of the watched names) the watch disables
    itself with one log line. Later failed polls are counted per stage and logged once.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        flavor: str | None,
        interval_s: float = 2.0,
        timeout_s: float = 2.0,
        rule: OverCapacityRule | None = None,
        clock=time.perf_counter,
        headers: Mapping[str, str] | None = None,
    ):
        root = server_root(base_url)
        self.url = root + METRICS_PATH
        self.flavor, self.interval_s, self.timeout_s = flavor, interval_s, timeout_s

        def client() -> StreamClient:
            # the same server as the streams' (its root): the same key and headers (a gateway's)
            return StreamClient(root, api_key=api_key, headers=headers, connect_timeout_s=timeout_s,
                                read_timeout_s=timeout_s)

        # one for the polling greenlet, one for the reads at the window's edges (never waiting on a poll)
        self._poll_client, self._edge_client = client(), client()
        self.clock = clock
        self.stages = StageWatch(rule)
        self.slices = StageWatch(rule)  # time slices (docs/soak.md): the same polls, cut by cut_slice
        self._slice_edge: Edge | None = None
        self.disabled: str | None = None
        self._seen_ok = self._warned = False
        self._poll_errors = 0
        self._greenlet: gevent.Greenlet | None = None
        self._opened: Edge | None = None  # /metrics as the current window opened

    def start(self) -> ServerWatch:
        self._greenlet = gevent.spawn(self._run)
        return self

    def _run(self) -> None:
        while self.poll_once():
            gevent.sleep(self.interval_s)

    def poll_once(self) -> bool:
        """One poll; False once the watch has disabled itself."""
        text, error = self._get(self._poll_client)
        samples = parse_metrics(text) if error is None else {}
        self.flavor = self.flavor or flavor_of(samples)
        sample = watch_sample(samples, self.flavor)
        if sample is not None:
            self._seen_ok = True
            self.stages.feed(self.clock(), sample)
            self.slices.feed(self.clock(), sample)
        elif not self._seen_ok:
            self.disabled = error or f"no {self.flavor or 'vLLM/SGLang'} queue or KV metrics in it"
            log.warning(
                "server watch off: GET %s: %s (no preemption/queue figures per stage)",
                self.url,
                self.disabled,
            )
            return False
        else:
            self._poll_errors += 1
            if not self._warned:
                self._warned = True
                log.warning(
                    "server watch: GET %s failed (%s); counting failed polls per stage",
                    self.url,
                    error or "metrics missing",
                )
        return True

    @staticmethod
    def _get(client: StreamClient) -> tuple[str, str | None]:
        """(/metrics text, None), or ("", what failed)."""
        try:
            return client.get_text(METRICS_PATH), None
        except RequestError as exc:
            return "", failure_text(exc)

    def edge(self) -> Edge | None:
        """One read of /metrics for a window's edge (``loadgen.server.window``), or None when the
        watch has not seen /metrics answer (or is off) or this read failed."""
        if not self._seen_ok:
            return None
        t = self.clock()
        text, error = self._get(self._edge_client)
        return None if error is not None else Edge((t + self.clock()) / 2, parse_metrics(text))

    def begin_stage(self, index: int, concurrency: int | None = None) -> None:
        self._poll_errors = 0
        self._opened = self.edge()
        self.stages.begin(index, self.clock(), concurrency)

    def end_stage(self, index: int) -> dict:
        """The stage's ``server`` object: StageWatch.end(...) + flavor, the counter behind
        ``preemptions``, failed polls, why the watch is off (None if on), and what the server's
        counters say about the window (``loadgen.server.window.window_figures``: /metrics read
        when the window opened and when it closed; e.g. ``output_tokens_per_s``)."""
        closed = self.edge()
        out = self.stages.end(index, self.clock())
        out.update(window_figures(self.flavor, self._opened, closed))
        counter = WATCH_METRICS.get(self.flavor or "", {}).get("preemptions_total", (None,))[0]
        out.update(
            flavor=self.flavor,
            preemption_metric=counter,
            poll_errors=self._poll_errors,
            disabled=self.disabled,
        )
        return out

    def cut_slice(self, first: bool = False) -> dict | None:
        """A time slice's edge: the server's figures since the previous cut (StageWatch.end: KV use
        mean and max, waiting max, preemptions; the prefix cache hit rate between the two edge
        reads), and the next slice begins. ``first``: the window opens, nothing to return."""
        t, edge = self.clock(), self.edge()
        out = None if first else {**self.slices.end(0, t), **prefix_cache(self.flavor, self._slice_edge, edge)}
        self.slices.begin(0, t)
        self._slice_edge = edge
        return out

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=True, timeout=self.timeout_s + 1)
            self._greenlet = None
        self._poll_client.close()
        self._edge_client.close()
