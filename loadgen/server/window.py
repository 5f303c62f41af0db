"""What the server's own counters say about one measurement window: pure, no I/O, no clock.

The server watch (``loadgen.server.watch``) reads ``/metrics`` once as a stage's window opens and
once as it closes (an *edge read*: ``Edge(t, samples)``, ``t`` the middle of the GET, so the
window's edges are known to half a GET's round trip). Each reader in ``READERS`` turns the two
edges into figures of the stage's ``server`` object; a reader whose series the server does not
export gives None. Counters are summed over label sets (engines, DP ranks, replicas) in both
edges; a counter that went down between them (a server restart) gives None, never a negative.

Readers: ``generation`` (the server's own output tokens and tokens/s over the window), ``latency``
(``loadgen.server.window_latency``: its latency histograms over the window).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from loadgen.server.answers import GENERATION_COUNTERS, Samples, series_total


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


def generation(flavor: str | None, opened: Edge | None, closed: Edge | None) -> dict:
    """``output_tokens``: the server's generation-token counter over the window;
    ``output_tokens_per_s`` = that / (t_close - t_open). None without the counter."""
    tokens = counter_delta(opened, closed, GENERATION_COUNTERS.get(flavor or ""))
    if tokens is None or closed.t <= opened.t:
        return {"output_tokens": None, "output_tokens_per_s": None}
    return {"output_tokens": int(tokens), "output_tokens_per_s": tokens / (closed.t - opened.t)}


from loadgen.server.window_latency import latency  # noqa: E402  (it imports Edge only for typing)

WindowReader = Callable[[str | None, Edge | None, Edge | None], dict]
READERS: tuple[WindowReader, ...] = (generation, latency)


def window_figures(flavor: str | None, opened: Edge | None, closed: Edge | None) -> dict:
    """Every reader's figures for one window, merged into one dict."""
    out: dict = {}
    for reader in READERS:
        out.update(reader(flavor, opened, closed))
    return out
