"""Cost and efficiency of a stage: tokens/s per GPU, dollars per million tokens, the Pareto front.

Pure: no I/O, no clock. The scenario's ``cost`` section says what serves the load:
``cost.gpus`` (GPUs behind the endpoint) and ``cost.gpu_hour_usd`` (the price of one GPU for an
hour, in dollars or any currency: the figures are in the same unit). Per stage, from its row:

- output tok/s per GPU      = output tok/s / gpus
  (output tok/s: output tokens whose chunks arrived in the window / window_s, ``loadgen.stats.metrics``)
- total tok/s per GPU       = (input tok/s + output tok/s) / gpus
  (input tok/s: prompt tokens of the stage's ok requests / window_s; its requests are those sent
  in its window)
- $ per million output tok  = gpu_hour_usd x gpus / (output tok/s x 3600) x 1e6
- $ per million total tok   = gpu_hour_usd x gpus / (total tok/s x 3600) x 1e6

that is, what the GPUs cost for the hour divided by the millions of tokens served in that hour at
the stage's rate. With GPU telemetry (``--gpu-metrics``: the row's ``gpu`` object,
``loadgen.server.gpu_window``), the energy:

- J per output token        = gpu.energy_j / (output tok/s x window_s)
  (the GPUs' energy over the window / the output tokens that arrived in it)
- kWh per million output tok = J per output token x 1e6 / 3.6e6

None without ``gpu.energy_j`` or without an output token in the window. None without ``gpus`` (per GPU) or ``gpu_hour_usd`` (dollars), or without a
rate (no window, no token): a stage that served nothing has no price per token.

The Pareto front (``pareto_front``) of the stages in (tokens/s per user, tokens/s per GPU), both
larger is better: a stage is on the front when no other stage is at least as good on both and
better on one. tokens/s per user is the stage's per-request decode rate p50 (``decode_tps_p50``,
(N - 1) / (E2E - TTFT)): how fast one user reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

SECONDS_PER_HOUR = 3600.0
PER_MILLION = 1e6
JOULES_PER_KWH = 3.6e6


@dataclass(frozen=True)
class CostConfig:
    """The ``cost:`` block of a scenario. Nothing set: no cost figures."""

    gpus: int | None = None  # GPUs serving the endpoint
    gpu_hour_usd: float | None = None  # price of one GPU-hour


def per_gpu(tokens_per_s: float | None, gpus: int | None) -> float | None:
    """tokens/s / gpus; None without either."""
    if tokens_per_s is None or not gpus:
        return None
    return tokens_per_s / gpus


def usd_per_million(tokens_per_s: float | None, gpus: int | None, gpu_hour_usd: float | None) -> float | None:
    """gpu_hour_usd x gpus / (tokens_per_s x 3600) x 1e6: the price of a million tokens served at
    ``tokens_per_s`` on ``gpus`` GPUs; None without a price, GPUs or a positive rate."""
    if gpu_hour_usd is None or not gpus or not tokens_per_s:
        return None
    return gpu_hour_usd * gpus / (tokens_per_s * SECONDS_PER_HOUR) * PER_MILLION


def joules_per_token(energy_j: float | None, tokens_per_s: float | None, window_s: float | None) -> float | None:
    """energy_j / (tokens_per_s x window_s): the energy per token served in the window; None
    without the energy, a window or a token."""
    if energy_j is None or not tokens_per_s or not window_s:
        return None
    return energy_j / (tokens_per_s * window_s)


def stage_cost(row: dict, cost: CostConfig) -> dict:
    """The cost fields of a stage row (``loadgen.stats.metrics`` ``COST_METRICS`` keys), from its
    ``output_tokens_per_s``, ``input_tokens`` and ``window_s`` (formulas: module docstring)."""
    out_tps, window = row.get("output_tokens_per_s"), row.get("window_s")
    total_tps = None
    if out_tps is not None and window:
        total_tps = out_tps + (row.get("input_tokens") or 0) / window
    joules = joules_per_token((row.get("gpu") or {}).get("energy_j"), out_tps, window)
    return {
        "output_tokens_per_gpu_per_s": per_gpu(out_tps, cost.gpus),
        "total_tokens_per_gpu_per_s": per_gpu(total_tps, cost.gpus),
        "usd_per_million_output_tokens": usd_per_million(out_tps, cost.gpus, cost.gpu_hour_usd),
        "usd_per_million_total_tokens": usd_per_million(total_tps, cost.gpus, cost.gpu_hour_usd),
        "joules_per_output_token": joules,
        "kwh_per_million_output_tokens": None if joules is None else joules * PER_MILLION / JOULES_PER_KWH,
    }


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points (x, y) that no other point dominates (>= on both, > on one), both
    larger is better; in the order of ``points``. Equal points are all on the front."""
    front = []
    for i, (x, y) in enumerate(points):
        dominated = any(ox >= x and oy >= y and (ox > x or oy > y) for j, (ox, oy) in enumerate(points) if j != i)
        if not dominated:
            front.append(i)
    return front
