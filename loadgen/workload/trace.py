"""Trace replay: a dataset whose lines carry a ``timestamp`` (ms) is sent on that schedule. Pure.

A timestamped dataset turns the run into one open-loop stage (loadgen.locust_face.open_loop) at the trace's
mean rate, so the guard (Little's law), the offered/achieved rates, the lateness histogram and
the client-bound flag all work as for any rate stage:

    rate = speedup x (n - 1) / ((t_last - t_first) / 1000)       requests/s, n lines

Each load process replays its disjoint share (loadgen.workload.dataset.share, file order: every
``parts``-th line) at the lines' own times, scaled by ``--trace-speedup`` F:

    due_i = (t_i - t_first) / 1000 / F        seconds from the stage's start

If the stage lasts longer than the trace, the trace starts over one period later (period = the
trace's span + its mean gap), so the rate stays the trace's. The dispatcher sends each line at its
due time, late ones at once and counted late, exactly as a generated schedule (no coordinated
omission); ``hash_ids`` lines get shared prefixes (token IDs, or words for text prompts: loadgen.workload.asks).
"""

from __future__ import annotations

from dataclasses import replace

from loadgen.errors import ConfigError
from loadgen.workload.dataset import DatasetRequest, share


def is_trace(dataset: list[DatasetRequest] | None) -> bool:
    """Every line has a timestamp (loadgen.workload.dataset allows all or none)."""
    return bool(dataset) and dataset[0].timestamp_ms is not None


def span_s(dataset: list[DatasetRequest]) -> tuple[float, float]:
    """(span, period) of the trace in its own seconds: t_last - t_first, and span + mean gap."""
    times = sorted(r.timestamp_ms for r in dataset)
    span = (times[-1] - times[0]) / 1000.0
    gap = span / (len(times) - 1) if len(times) > 1 else 1.0
    return span, span + (gap or 1.0)


def trace_rate_per_s(dataset: list[DatasetRequest], speedup: float) -> float:
    """The trace's mean rate, speedup x lines per period (module docstring)."""
    _, period = span_s(dataset)
    return round(speedup * len(dataset) / period, 9)


def trace_scenario(scenario, dataset: list[DatasetRequest] | None):
    """The scenario a timestamped dataset runs as: one rate stage at the trace's mean rate (unless
    rate stages were given), else ``scenario`` unchanged."""
    if not is_trace(dataset) or scenario.open_loop:
        return scenario
    if scenario.workload.turns > 1:
        raise ConfigError("workload.turns", scenario.workload.turns, "cannot replay a trace (its lines are sent "
                          "at their timestamps, not after the previous turn)", "drop --turns, or the timestamps")
    rate = trace_rate_per_s(dataset, scenario.workload.trace_speedup)
    return replace(scenario, rate=replace(scenario.rate, list=(rate,)))


class TraceSchedule:
    """One process's lines of the trace with their due times, cycling (module docstring).
    ``next()`` returns (due seconds from the stage's start, the line)."""

    def __init__(self, dataset: list[DatasetRequest], part: int, parts: int, speedup: float):
        ordered = sorted(dataset, key=lambda r: (r.timestamp_ms, r.line))
        self.t0_ms = ordered[0].timestamp_ms
        self.lines = share(ordered, part, parts, shuffle=False, seed=0)
        self.speedup = speedup
        self.period_s = span_s(dataset)[1] / speedup
        self._i = 0

    def next(self) -> tuple[float, DatasetRequest] | None:
        if not self.lines:
            return None  # more processes than lines: this one sends nothing
        cycle, k = divmod(self._i, len(self.lines))
        self._i += 1
        r = self.lines[k]
        return cycle * self.period_s + (r.timestamp_ms - self.t0_ms) / 1000.0 / self.speedup, r
