"""Fake window edges for the pure readers of loadgen/server/window*.py: a server's /metrics text,
parsed as the watch parses it, at a given time (tests/test_server_window*.py)."""

from __future__ import annotations

from loadgen.server.edges import Edge
from loadgen.server.replies import parse_metrics


def edge(t: float, *texts: str) -> Edge:
    """One edge at ``t`` seconds whose scrape is the concatenation of ``texts`` (Prometheus text)."""
    return Edge(t, parse_metrics("".join(texts)))


def hist_text(name: str, buckets: dict[str, float], total: float, labels: str = "") -> str:
    """Prometheus text of one histogram series: cumulative ``buckets`` {le: count}, ``_sum``."""
    sep = "," if labels else ""
    lines = [f"# TYPE {name} histogram"]
    lines += [f'{name}_bucket{{{labels}{sep}le="{le}"}} {c}' for le, c in buckets.items()]
    lines += [f"{name}_sum{{{labels}}} {total}", f"{name}_count{{{labels}}} {list(buckets.values())[-1]}"]
    return "\n".join(lines) + "\n"
