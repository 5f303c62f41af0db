"""What the server's own counters say about one measurement window: pure, no I/O, no clock.

The server watch (``loadgen.server.watch``) reads ``/metrics`` once as a stage's window opens and
once as it closes (an *edge read*: ``Edge(t, samples)``, ``t`` the middle of the GET, so the
window's edges are known to half a GET's round trip). Each reader in ``READERS`` turns the two
edges into figures of the stage's ``server`` object; a reader whose series the server does not
export gives None. Counters are summed over label sets (engines, DP ranks, replicas) in both
edges; a counter that went down between them (a server restart) gives None, never a negative.
A restart is also told by ``process_start_time_seconds`` (both servers export it): when it changed,
the counters count from 0 at the open (``window_figures``), so a new process whose counter already
passed the old value does not give a silently small delta.

Readers: ``generation`` (the server's own output tokens and tokens/s over the window);
``loadgen.server.window_latency``: its latency histograms over the window;
``loadgen.server.window_spec``: speculative decoding accept length/rate and the prefix cache hit rate.
``Edge`` and ``counter_delta`` live in ``loadgen.server.edges`` (so reader modules beside this one
import them without a cycle).
"""

from __future__ import annotations

from collections.abc import Callable

from loadgen.server.edges import Edge, as_reset, counter_delta, restarted
from loadgen.server.replies import GENERATION_COUNTERS
from loadgen.server.window_latency import latency
from loadgen.server.window_spec import prefix_cache, spec_decode

__all__ = ["Edge", "counter_delta", "READERS", "window_figures"]


def generation(flavor: str | None, opened: Edge | None, closed: Edge | None) -> dict:
    """``output_tokens``: the server's generation-token counter over the window;
    ``output_tokens_per_s`` = that / (t_close - t_open). None without the counter."""
    tokens = counter_delta(opened, closed, GENERATION_COUNTERS.get(flavor or ""))
    if tokens is None or closed.t <= opened.t:
        return {"output_tokens": None, "output_tokens_per_s": None}
    return {"output_tokens": int(tokens), "output_tokens_per_s": tokens / (closed.t - opened.t)}


WindowReader = Callable[[str | None, Edge | None, Edge | None], dict]
READERS: tuple[WindowReader, ...] = (generation, latency, spec_decode, prefix_cache)


def window_figures(flavor: str | None, opened: Edge | None, closed: Edge | None) -> dict:
    """Every reader's figures for one window, merged into one dict. When the server restarted in
    the window (``process_start_time_seconds`` changed between the edges) its counters started
    again from 0: every delta is the value at the close (what the new process counted; the old
    one's share before it stopped is lost), and ``server_restarted`` is True (absent otherwise)."""
    restart = restarted(opened, closed)
    if restart:
        opened = as_reset(opened, closed)
    out: dict = {}
    for reader in READERS:
        out.update(reader(flavor, opened, closed))
    if restart:
        out["server_restarted"] = True
    return out
