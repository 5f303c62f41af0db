"""The exporter's client-vs-server clock figures: those of the latest stage with a breakdown.

Pure: a stage row's ``breakdown`` (``loadgen.report.breakdown``) in, metric families out. The
figures are per finished stage (the server's histograms are read at the window's edges), so the
gauges change when a stage's row is written and hold between:

- ``llm_loadgen_stage_latency_seconds{clock="client|server", metric="ttft|e2e|itl",
  stat="mean|p50|p90|p99"}``: each clock's figure over the stage's window (server percentiles as
  Prometheus' histogram_quantile interpolates them; absent where the server has none);
- ``llm_loadgen_stage_breakdown_seconds{metric, part}``: the client's mean split into server
  queue, prefill, decode, the server's rest and network + client (they add up to the client's mean).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily

from loadgen.report.breakdown import stack

PREFIX = "llm_loadgen_"  # as exporter.PREFIX (that module imports this one)
STATS = ("mean", "p50", "p90", "p99")


def clock_families(stage: int | None, breakdown: dict | None, label_names: tuple[str, ...],
                   labels: list[str]) -> Iterator[GaugeMetricFamily]:
    """The two families, or nothing before a stage with a breakdown has finished. ``stage`` (its
    index) is not a label: a new stage replaces the series rather than adding to them."""
    if stage is None or not breakdown:
        return
    latency = GaugeMetricFamily(f"{PREFIX}stage_latency_seconds",
                                "Latest finished stage: each clock's latency figure over the stage's window "
                                "(client: its own histograms; server: its /metrics histograms' delta).",
                                labels=(*label_names, "clock", "metric", "stat"))
    parts = GaugeMetricFamily(f"{PREFIX}stage_breakdown_seconds",
                              "Latest finished stage: the client's mean latency split into server queue, "
                              "prefill, decode, the server's rest and network + client (they add up).",
                              labels=(*label_names, "metric", "part"))
    for metric, row in breakdown.items():
        if not isinstance(row, dict) or "client_mean_s" not in row:
            continue  # verdict, disagreement
        for clock in ("client", "server"):
            for stat in STATS:
                if (value := row.get(f"{clock}_{stat}_s")) is not None:
                    latency.add_metric([*labels, clock, metric, stat], float(value))
        for part, value in stack(row):
            parts.add_metric([*labels, metric, part], float(value))
    yield from (latency, parts)


def latest_breakdown(rows: list[dict]) -> tuple[int | None, dict | None]:
    """(index, breakdown) of the newest stage row with a breakdown; (None, None) before one."""
    row = next((r for r in reversed(rows) if r.get("breakdown")), None)
    return (row["index"], row["breakdown"]) if row else (None, None)
