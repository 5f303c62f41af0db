"""Time slices of a stage's window and a slice's row. Pure: no I/O, no clock.

A soak's window is cut into slices of ``slice_s`` seconds (``stages.slice_s``, docs/soak.md).
Slice j covers [open + j x slice_s, open + (j+1) x slice_s) of the window; the last one ends when
the window closes (a remainder of up to ``slice_tolerance`` joins it). A slice is a ``loadgen.stats.stage_stats.StageStats`` over its own time, kept by
the ``Collector`` (``Collector.slice``): the requests of its stage that *completed* in it, the
output tokens that *arrived* in it, the stage's in-flight time in it. Its row is computed with the
stage metrics' own formulas (``loadgen.stats.metrics.StageMetric.value``) over ``duration_s``:

    output_tokens_per_s = output tokens arrived in the slice / duration_s
    concurrency_mean    = in-flight integral over the slice (request-us) / 1e6 / duration_s
    <metric>_p50_s, <metric>_p99_s = quantiles of the requests completed in the slice

A p99 of fewer than ``FEW_SAMPLES`` requests is the slice's slowest request or next to it, not a
percentile: the row says ``few_samples`` (TTFT, TPOT and E2E have one sample per request; ITL one
per token, but their tokens come from those same few requests).
"""

from __future__ import annotations

import math

from loadgen.stats import metrics
from loadgen.stats.metrics import MS, TPOT, StageMetric

FEW_SAMPLES = 100  # below this many completed requests a slice's p99 is flagged ``few_samples``

_FROM_STAGE = ("output_tokens_per_s", "ttft_p50_s", "ttft_p99_s", "itl_p50_s", "itl_p99_s", "tpot_p50_s",
               "e2e_p50_s", "e2e_p99_s")
_BY_KEY = {m.key: m for m in metrics.STAGE_METRICS}
# The slice's figures: the stage metrics of the same name, plus TPOT p99 (not a stage column).
SLICE_METRICS: tuple[StageMetric, ...] = (
    *(_BY_KEY[k] for k in _FROM_STAGE),
    StageMetric("tpot_p99_s", TPOT, 0.99, "s", MS, "TPOT p99 (ms)"),
)
# The server's figures of a slice (``loadgen.server.overload.StageWatch.end`` over the slice, plus
# the prefix cache hit rate of its edge reads) and the client's (``Fleet.health_now`` at its close).
SERVER_FIELDS = ("kv_usage_mean", "kv_usage_max", "waiting_max", "preemptions", "prefix_cache_hit_rate")
CLIENT_FIELDS = ("cpu_percent", "loop_lag_s")


def slice_tolerance(slice_s: float) -> float:
    """A window closes on the run's tick (loadgen.run.plan.TICK_S), so up to a tick past its
    duration: up to a second of it (at most a tenth of a slice) joins the last slice rather than
    making a slice of its own."""
    return min(1.0, slice_s / 10)


def slice_count(window_s: float, slice_s: float) -> int:
    """Slices in a window of ``window_s``: ceil((window_s - tolerance) / slice_s), at least 1."""
    return max(1, math.ceil((window_s - slice_tolerance(slice_s)) / slice_s - 1e-9))


def slice_span(index: int, slice_s: float, window_s: float | None = None) -> tuple[float, float]:
    """(start, duration) of slice ``index`` in seconds since the window opened; with ``window_s``
    (the window has closed) the last slice ends at the close."""
    start = index * slice_s
    last = window_s is not None and index >= slice_count(window_s, slice_s) - 1
    end = window_s if last else start + slice_s
    return start, max(end - start, 0.0)


def slice_row(stage: int, index: int, start_s: float, duration_s: float, stats, slice_s: float,
              server: dict | None = None, client: dict | None = None) -> dict:
    """One slice's row (slices.csv, summary.json ``slices``) from its StageStats ``stats``.

    ``start_s``: seconds since the window opened; ``partial``: shorter than ``slice_s`` (the
    window closed inside it); ``error_rate`` = failed / (ok + failed) completed in it (None when
    none completed); ``few_samples``: fewer than FEW_SAMPLES requests completed in it (module doc).
    """
    done = stats.requests_ok + stats.error_count
    row = {
        "stage": stage,
        "slice": index,
        "start_s": round(start_s, 3),
        "duration_s": round(duration_s, 3),
        "partial": duration_s < slice_s - 1e-6,
        "requests": stats.requests_ok,
        "error_count": stats.error_count,
        "errors": dict(sorted(stats.errors.items())),
        "error_rate": stats.error_count / done if done else None,
        **{m.key: m.value(stats, duration_s) for m in SLICE_METRICS},
        "concurrency_mean": stats.inflight_us / 1e6 / duration_s if duration_s else None,
        "few_samples": stats.requests_ok < FEW_SAMPLES,
    }
    server = server or {}
    client = client or {}
    row.update({f"server_{k}": server.get(k) for k in SERVER_FIELDS})
    row.update({f"client_{k}": client.get(k) for k in CLIENT_FIELDS})
    return row


SLICE_COLUMNS: tuple[str, ...] = (
    "stage", "slice", "start_s", "duration_s", "partial", "requests", "error_count", "errors", "error_rate",
    *(m.key for m in SLICE_METRICS), "concurrency_mean", "few_samples",
    *(f"server_{k}" for k in SERVER_FIELDS), *(f"client_{k}" for k in CLIENT_FIELDS),
)  # slices.csv's columns, in slice_row's order (errors: kind=n;kind=n)
