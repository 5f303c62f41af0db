"""The edges of a measurement window: ``/metrics`` read as it opens and as it closes. Pure.

``Edge(t, samples)``: ``t`` the middle of the GET on the watch's clock; ``counter_delta`` the
vocabulary every window reader (``loadgen.server.window``, ``window_spec``) shares.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.server.answers import Samples, series_total


@dataclass(frozen=True)
class Edge:
    t: float  # the middle of the GET, on the watch's clock (seconds)
    samples: Samples


def counter_delta(opened: Edge | None, closed: Edge | None, name: str | None) -> float | None:
    """closed - opened of counter ``name`` (summed over label sets), None when either edge or
    the series is missing or the counter went down (a restart in between)."""
    if opened is None or closed is None or name is None:
        return None
    a, b = opened.samples.get(name), closed.samples.get(name)
    a, b = (series_total(a) if a else None), (series_total(b) if b else None)
    if a is None or b is None or b < a:
        return None
    return b - a
