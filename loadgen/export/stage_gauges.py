"""The exporter's figures of finished stages: one series per finished stage, labelled with it.

Pure: the run's finished stage rows (summary.json's ``stages``, oldest first) in, metric families
out. A stage's figures are final once its row is written, so its series appear then and hold until
the run ends. Every family carries the stage's labels ``stage`` (its index), ``concurrency`` (closed
loop; empty in a rate stage) and ``rate`` (open loop: the offered requests/s; empty otherwise), so a
scrape says which stage a figure belongs to, and a table can show every stage side by side. The
series are as many as the run's stages (a sweep has a few to a few dozen), never per request.

- ``llm_loadgen_stage_finished``: 1 series per finished stage, its value the stage index: the
  largest is the latest finished stage. With F this family, ``X and on(job, instance, stage)
  (F == on(job, instance) group_left max by (job, instance) (F))`` keeps the latest stage's series
  of X: the dashboard's "latest finished stage" panels;
- ``llm_loadgen_stage_latency_seconds{clock="client|server", metric="ttft|e2e|itl",
  stat="mean|p50|p90|p99"}``: each clock's figure over the stage's window (server percentiles as
  Prometheus' histogram_quantile interpolates them; absent where the server has none), from the
  row's ``breakdown`` (``loadgen.analysis.breakdown``);
- ``llm_loadgen_stage_breakdown_seconds{metric, part}``: the client's mean split into server
  queue, prefill, decode, the server's rest and network + client (they add up to the client's mean);
- ``llm_loadgen_server_spec_accept_length``, ``..._server_spec_acceptance_ratio``,
  ``..._server_prefix_cache_hit_ratio``: the server's own figures over the stage's window (the
  row's ``server``, ``loadgen.server.window_spec``);
- ``llm_loadgen_stage_itl_chunk_seconds{stat="p50|p90|p99"}``: the client's per-chunk gap percentiles
  over the stage's window (the row's ``itl_chunk_p*_s``, vLLM's and SGLang's bench "ITL"; the
  table's metrics of source ``ITL_CHUNK``), with or without the server's histograms;
- the cost figures (``loadgen.stats.metrics.COST_METRICS``, formulas in ``loadgen.stats.cost``),
  only in a run with ``cost.gpus``: ``llm_loadgen_stage_output_tokens_per_gpu_per_second``,
  ``..._stage_total_tokens_per_gpu_per_second``, ``..._stage_usd_per_million_output_tokens`` and
  ``..._stage_usd_per_million_total_tokens`` (the price's currency; only with ``cost.gpu_hour_usd``);
  with ``--gpu-metrics``, ``..._stage_joules_per_output_token`` (its kWh per million tokens is not
  exported: not a base unit, and J/token x 1e6 / 3.6e6);
- the GPUs over the stage's window (the row's ``gpu``, ``loadgen.server.gpu_window``; with
  ``--gpu-metrics``), in base units: ``llm_loadgen_stage_gpus``, ``..._stage_gpu_power_watts`` (mean
  draw, summed over the GPUs), ``..._stage_gpu_utilization_ratio`` (mean, 0-1),
  ``..._stage_gpu_memory_used_max_bytes`` and ``..._stage_gpu_energy_joules``.

A figure the stage does not have (None) is absent, not 0.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily

from loadgen.analysis.breakdown import stack
from loadgen.stats.metrics import COST_METRICS, ITL_CHUNK, STAGE_METRICS

PREFIX = "llm_loadgen_"  # as exporter.PREFIX (that module imports this one)
STAGE_LABELS = ("stage", "concurrency", "rate")
STATS = ("mean", "p50", "p90", "p99")
# the chunk-gap percentiles of a stage row, from the one table: (row key, stat label)
CHUNK_GAPS = tuple((m.key, f"p{round(m.q * 100)}") for m in STAGE_METRICS if m.source is ITL_CHUNK)
# the server's window figures: (row["server"] key, name after the prefix, HELP)
SERVER_FIGURES = (
    ("spec_accept_length", "server_spec_accept_length",
     "The server's speculative decoding accept length over the stage's window: 1 + accepted draft tokens / "
     "drafts from its counters (SGLang: its gauge at the window's close)."),
    ("spec_acceptance_rate", "server_spec_acceptance_ratio",
     "The server's accepted draft tokens / draft tokens over the stage's window, 0-1."),
    ("prefix_cache_hit_rate", "server_prefix_cache_hit_ratio",
     "The server's prefix cache hit rate over the stage's window: cached prompt tokens / prompt tokens "
     "from its counters, 0-1."),
)
# the cost figures: (row key, name after the prefix, HELP with the formula), from the one table; kWh is
# not a base unit (Prometheus names carry base units): the joules per token are exported instead
COST_FIGURES = tuple((m.key, "stage_" + m.key.replace("_per_s", "_per_second"),
                      f"{m.title} of the stage: {m.source.formula}.") for m in COST_METRICS if m.unit != "kWh")
# the GPUs over the window: (row["gpu"] key, name after the prefix, HELP, scale to the base unit)
MIB = 1024 * 1024
GPU_FIGURES = (
    ("gpus", "stage_gpus", "GPUs the DCGM exporters (--gpu-metrics) reported over the stage's window.", 1),
    ("power_w_total", "stage_gpu_power_watts", "The GPUs' power draw over the stage's window: each GPU's "
     "mean DCGM_FI_DEV_POWER_USAGE over the reads, summed over the GPUs (W).", 1),
    ("util_pct_mean", "stage_gpu_utilization_ratio", "The GPUs' mean DCGM_FI_DEV_GPU_UTIL over the stage's "
     "window, 0-1.", 0.01),
    ("fb_used_mib_max", "stage_gpu_memory_used_max_bytes", "The most framebuffer memory any GPU used in a "
     "read of the stage's window (DCGM_FI_DEV_FB_USED), bytes.", MIB),
    ("energy_j", "stage_gpu_energy_joules", "The GPUs' energy over the stage's window: the delta of "
     "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, else mean power x window (J).", 1),
)


def stage_labels(row: dict) -> list[str]:
    """The values of STAGE_LABELS for one stage row."""
    concurrency, rate = row.get("concurrency"), row.get("offered_rate_per_s")
    return [str(row["index"]), "" if concurrency is None else str(concurrency),
            "" if rate is None else f"{rate:g}"]


def stage_families(rows: Sequence[dict], label_names: tuple[str, ...],
                   labels: list[str]) -> Iterator[GaugeMetricFamily]:
    """The families of the finished stages ``rows``; nothing before the first stage has finished.
    A family none of the stages has a figure for is left out."""
    names = (*label_names, *STAGE_LABELS)
    finished = GaugeMetricFamily(f"{PREFIX}stage_finished",
                                 "One series per finished stage, its value the stage index (the largest: the "
                                 "latest finished stage).", labels=names)
    latency = GaugeMetricFamily(f"{PREFIX}stage_latency_seconds",
                                "Each clock's latency figure over a finished stage's window "
                                "(client: its own histograms; server: its /metrics histograms' delta).",
                                labels=(*names, "clock", "metric", "stat"))
    parts = GaugeMetricFamily(f"{PREFIX}stage_breakdown_seconds",
                              "A finished stage's client mean latency split into server queue, prefill, "
                              "decode, the server's rest and network + client (they add up).",
                              labels=(*names, "metric", "part"))
    chunk_gap = GaugeMetricFamily(f"{PREFIX}stage_itl_chunk_seconds",
                                  "A finished stage's client per-chunk gap t(chunk i) - t(chunk i-1) percentiles "
                                  "over its window (one sample per chunk: vLLM's and SGLang's bench ITL).",
                                  labels=(*names, "stat"))
    figures = {name: GaugeMetricFamily(f"{PREFIX}{name}", help_text, labels=names)
               for _, name, help_text in SERVER_FIGURES + COST_FIGURES}
    figures.update({name: GaugeMetricFamily(f"{PREFIX}{name}", help_text, labels=names)
                    for _, name, help_text, _ in GPU_FIGURES})
    for row in rows:
        mine = [*labels, *stage_labels(row)]
        finished.add_metric(mine, float(row["index"]))
        for metric, clocks in (row.get("breakdown") or {}).items():
            if not isinstance(clocks, dict) or "client_mean_s" not in clocks:
                continue  # diagnosis, disagreement
            for clock in ("client", "server"):
                for stat in STATS:
                    if (value := clocks.get(f"{clock}_{stat}_s")) is not None:
                        latency.add_metric([*mine, clock, metric, stat], float(value))
            for part, value in stack(clocks):
                parts.add_metric([*mine, metric, part], float(value))
        for key, stat in CHUNK_GAPS:
            if (value := row.get(key)) is not None:
                chunk_gap.add_metric([*mine, stat], float(value))
        server = row.get("server") or {}
        for key, name, _ in SERVER_FIGURES:
            if (value := server.get(key)) is not None:
                figures[name].add_metric(mine, float(value))
        for key, name, _ in COST_FIGURES:
            if (value := row.get(key)) is not None:
                figures[name].add_metric(mine, float(value))
        gpu = row.get("gpu") or {}
        for key, name, _, scale in GPU_FIGURES:
            if (value := gpu.get(key)) is not None:
                figures[name].add_metric(mine, float(value) * scale)
    yield from (fam for fam in (finished, latency, parts, chunk_gap, *figures.values()) if fam.samples)
