"""The edges of a measurement window: ``/metrics`` read as it opens and as it closes. Pure.

``Edge(t, samples)``: ``t`` the middle of the GET on the watch's clock; ``counter_delta`` the
vocabulary every window reader (``loadgen.server.window``, ``window_spec``) shares; ``restarted``
and ``as_reset``: a server restart inside the window, told by ``process_start_time_seconds``.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.server.replies import Samples, series_total


@dataclass(frozen=True)
class Edge:
    t: float  # the middle of the GET, on the watch's clock (seconds)
    samples: Samples


# Counters a server creates only when they first count something: absent at a window's open and
# present at its close means 0 at the open. SGLang's cached_tokens_total is a labelled Counter, which
# prometheus_client shows only once first incremented: after the first prefix-cache hit
# (docs/servers.md). "The server's other metrics" at the open: any series of the same prefix, so a
# read of something else stays unknown.
LAZY_COUNTERS = frozenset({"sglang:cached_tokens_total"})


START_TIME = "process_start_time_seconds"  # prometheus_client's process collector; vLLM and SGLang export it


def restarted(opened: Edge | None, closed: Edge | None) -> bool | None:
    """Whether the server restarted between the edges: its ``process_start_time_seconds`` values
    (one per process exporting it) differ; None when an edge or the series is missing."""
    if opened is None or closed is None:
        return None
    a, b = opened.samples.get(START_TIME), closed.samples.get(START_TIME)
    if not a or not b:
        return None
    return sorted(v for _, v in a) != sorted(v for _, v in b)


def as_reset(opened: Edge, closed: Edge) -> Edge:
    """The open edge a restarted server's counters start from: every series of the close edge at
    0 (so every counter's and histogram's delta over the window is its value at the close)."""
    return Edge(opened.t, {name: [(labels, 0.0) for labels, _ in series] for name, series in closed.samples.items()})


def counter_delta(opened: Edge | None, closed: Edge | None, name: str | None) -> float | None:
    """closed - opened of counter ``name`` (summed over label sets), None when either edge or
    the series is missing or the counter went down (a restart in between). A counter of
    LAZY_COUNTERS absent at the open, while that read had the server's other metrics, started at 0."""
    if opened is None or closed is None or name is None:
        return None
    a, b = opened.samples.get(name), closed.samples.get(name)
    a, b = (series_total(a) if a else None), (series_total(b) if b else None)
    if a is None and b is not None and name in LAZY_COUNTERS and opened.samples.get(name) is None and any(
            key.startswith(name.split(":", 1)[0] + ":") for key in opened.samples):
        a = 0.0
    if a is None or b is None or b < a:
        return None
    return b - a
