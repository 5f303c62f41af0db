"""Time-weighted requests in flight of one process, credited to the stage being measured. Pure.

Little's law says a stage holds L = lambda x W requests in flight on average; to check it (and to
report what the server really carried) each process integrates its in-flight count over time:

    inflight_us(k) = sum over the intervals of stage k's window of n(t) x dt   (request-microseconds)
    inflight_peak(k) = max n(t) during the window

n(t) counts every request of this process in flight at t, whichever stage sent it (the server
carries them all). The integral is kept in whole request-microseconds so it merges like the other
counters: the fleet's integral is exactly the sum of the processes' integrals, and the stage's mean
concurrency = inflight_us / 1e6 / window_s. The peak merges by max (see loadgen.stats.metrics). The
caller passes the time ``t`` (perf_counter seconds) of every change.
"""

from __future__ import annotations


class InflightMeter:
    """``change(+1/-1, t)`` as requests start and finish; ``measure(stage or None, t)`` as the
    window opens and closes. Writes into ``collector`` (a loadgen.stats.stage_stats.Collector)."""

    def __init__(self, collector):
        self.collector = collector
        self.n = 0
        self.stage: int | None = None
        self._t: float | None = None
        self._carry_us = 0.0  # the fraction of a request-microsecond not yet credited

    def _advance(self, t: float) -> None:
        if self.stage is not None and self._t is not None and t > self._t:
            exact = self.n * (t - self._t) * 1e6 + self._carry_us
            whole = int(exact)
            self._carry_us = exact - whole
            if whole:
                self.collector.add_inflight(self.stage, whole, self.n)
        self._t = t

    def change(self, delta: int, t: float) -> None:
        self._advance(t)
        self.n += delta
        if self.stage is not None:
            self.collector.add_inflight(self.stage, 0, self.n)

    def measure(self, stage: int | None, t: float) -> None:
        """From ``t`` on, time counts toward ``stage`` (None: no window is open)."""
        self._advance(t)
        if stage != self.stage:
            self._carry_us = 0.0
        self.stage = stage
        if stage is not None:
            self.collector.add_inflight(stage, 0, self.n)
