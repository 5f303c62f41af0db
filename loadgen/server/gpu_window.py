"""What the GPUs' own telemetry says about one measurement window: pure, no I/O, no clock.

The GPU watch (``loadgen.server.gpu_watch``) reads each DCGM exporter's ``/metrics`` (one exporter
per node, ``--gpu-metrics URL``) as a stage's window opens, during it, and as it closes; each read of
every exporter is one ``GpuReading(t, gpus)``. The names and units are dcgm-exporter's default
counters (``etc/default-counters.csv``, read in dcgm-exporter 4.5.3-4.8.2):

- ``DCGM_FI_DEV_POWER_USAGE``               gauge,   power draw, W
- ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``  counter, energy since boot, mJ
- ``DCGM_FI_DEV_GPU_UTIL``                  gauge,   utilisation, %
- ``DCGM_FI_DEV_FB_USED``                   gauge,   framebuffer memory used, MiB

A GPU is one ``(exporter index, UUID label)`` (its ``gpu`` index label when it has no UUID). Over
the window (``window_gpu``), with readings r_0 (the open edge) .. r_n (the close edge):

- ``power_w_total``        = sum over GPUs of (mean of its power samples over the readings), W
- ``power_w_mean_per_gpu`` = power_w_total / gpus
- ``util_pct_mean``        = mean over GPUs of (mean of its utilisation samples), %
- ``fb_used_mib_max``      = the largest memory-used sample of any GPU in any reading, MiB
- ``energy_j``             = sum over GPUs of (energy at r_n - energy at r_0) / 1000, J
  (``energy_source: counter``) when every GPU has the counter at both edges, none went down and
  some advanced; else power_w_total x (t_n - t_0) (``energy_source: power_x_window``); None
  without either. A counter that did not advance at all is stale, not idle: dcgm-exporter
  refreshes its values every ``--collect-interval`` (30 000 ms by default, ``pkg/cmd/app.go``),
  so a window shorter than that can see the same counter at both edges.

The means are of the samples as read (one per reading, readings about evenly spaced), not
time-weighted. Energy per output token (``loadgen.stats.cost``) divides ``energy_j`` by the stage's
output tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from loadgen.server.replies import Samples

POWER_W = "DCGM_FI_DEV_POWER_USAGE"
ENERGY_MJ = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
UTIL_PCT = "DCGM_FI_DEV_GPU_UTIL"
FB_USED_MIB = "DCGM_FI_DEV_FB_USED"
DCGM_NAMES = (POWER_W, ENERGY_MJ, UTIL_PCT, FB_USED_MIB)

GPU_KEYS = ("gpus", "power_w_total", "power_w_mean_per_gpu", "util_pct_mean", "fb_used_mib_max", "energy_j",
            "energy_source", "window_s")

GpuKey = tuple[int, str]  # (the exporter's index in --gpu-metrics, the GPU's UUID or index)


@dataclass(frozen=True)
class GpuSample:
    """One GPU in one read; None where the exporter does not export the field."""

    power_w: float | None = None
    energy_mj: float | None = None
    util_pct: float | None = None
    fb_used_mib: float | None = None


@dataclass(frozen=True)
class GpuReading:
    t: float  # the middle of the reads, on the watch's clock (seconds)
    gpus: Mapping[GpuKey, GpuSample]


def gpu_samples(samples: Samples, exporter: int) -> dict[GpuKey, GpuSample]:
    """The GPUs in one exporter's parsed ``/metrics`` (``loadgen.server.replies.parse_metrics``);
    empty when it has none of the DCGM names above. NaN values count as missing."""
    fields: dict[GpuKey, dict[str, float]] = {}
    for name, attr in ((POWER_W, "power_w"), (ENERGY_MJ, "energy_mj"), (UTIL_PCT, "util_pct"),
                       (FB_USED_MIB, "fb_used_mib")):
        # prometheus_client's parser names a counter's sample ``<name>_total`` even when the
        # exporter wrote ``<name>`` (dcgm-exporter does): either spelling is the counter
        for labels, value in samples.get(name) or samples.get(name + "_total") or []:
            gpu = labels.get("UUID") or labels.get("uuid") or labels.get("gpu")
            if gpu is None or value is None or value != value:
                continue
            fields.setdefault((exporter, gpu), {})[attr] = float(value)
    return {key: GpuSample(**values) for key, values in fields.items()}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def window_gpu(readings: Sequence[GpuReading]) -> dict:
    """The stage's ``gpu`` figures (``GPU_KEYS``) from the readings in time order, the first and
    last being the window's edges (formulas: module docstring). ``gpus``: the GPUs seen in any
    reading; every figure None when no reading saw a GPU."""
    out: dict = dict.fromkeys(GPU_KEYS)
    keys = sorted({key for r in readings for key in r.gpus})
    out["gpus"] = len(keys)
    if not keys:
        return out
    first, last = readings[0], readings[-1]
    window_s = last.t - first.t if len(readings) > 1 and last.t > first.t else None
    out["window_s"] = window_s
    power = [_mean([p for r in readings if (p := _field(r, key, "power_w")) is not None]) for key in keys]
    util = [_mean([u for r in readings if (u := _field(r, key, "util_pct")) is not None]) for key in keys]
    memory = [m for r in readings for key in keys if (m := _field(r, key, "fb_used_mib")) is not None]
    if known := [p for p in power if p is not None]:
        out["power_w_total"] = sum(known)
        out["power_w_mean_per_gpu"] = out["power_w_total"] / len(known)
    out["util_pct_mean"] = _mean([u for u in util if u is not None])
    out["fb_used_mib_max"] = max(memory) if memory else None
    deltas = [_delta(first, last, key) for key in keys] if window_s else [None]
    if None not in deltas and sum(deltas) > 0:
        out.update(energy_j=sum(deltas) / 1000.0, energy_source="counter")
    elif window_s and out["power_w_total"] is not None:
        out.update(energy_j=out["power_w_total"] * window_s, energy_source="power_x_window")
    return out


def _field(reading: GpuReading, key: GpuKey, attr: str) -> float | None:
    sample = reading.gpus.get(key)
    return None if sample is None else getattr(sample, attr)


def _delta(first: GpuReading, last: GpuReading, key: GpuKey) -> float | None:
    """The GPU's energy counter at the close - at the open (mJ); None when missing or it went down
    (a reset: the node rebooted, or the driver reloaded)."""
    a, b = _field(first, key, "energy_mj"), _field(last, key, "energy_mj")
    if a is None or b is None or b < a:
        return None
    return b - a
