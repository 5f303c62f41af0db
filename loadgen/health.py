"""Client health: CPU use and event-loop lag of a load-generating process, per stage.

A load generator that is itself the bottleneck reports its own delays as the server's TTFT and
ITL. Every process that runs users samples:

- loop lag: a greenlet asks to sleep ``interval_s``; lag = actual sleep − interval_s. When the gevent
  hub is busy, every stream's timestamps are late by about this much.
- CPU %: process CPU seconds / wall seconds × 100 over the stage (100 = one core busy).

A stage is *client-bound* when CPU % ≥ ``cpu_percent_max`` or the loop-lag p99 ≥
``loop_lag_p99_s_max`` in any load-generating process (the worst process decides).
"""

from __future__ import annotations

import time

import gevent

from loadgen.hist import LogHistogram


class StageHealth:
    """CPU seconds, wall seconds and loop-lag samples of one process during one stage."""

    __slots__ = ("cpu_s", "wall_s", "lag")

    def __init__(self) -> None:
        self.cpu_s = 0.0
        self.wall_s = 0.0
        self.lag = LogHistogram()

    @property
    def cpu_percent(self) -> float:
        """cpu_percent = cpu_s / wall_s × 100 (0 when no wall time was observed)."""
        return 100.0 * self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    def to_wire(self) -> dict:
        return {"cpu_s": self.cpu_s, "wall_s": self.wall_s, "lag": self.lag.to_wire()}

    @classmethod
    def from_wire(cls, d: dict) -> StageHealth:
        h = cls()
        h.cpu_s, h.wall_s, h.lag = d["cpu_s"], d["wall_s"], LogHistogram.from_wire(d["lag"])
        return h

    def merge(self, other: StageHealth) -> None:
        self.cpu_s += other.cpu_s
        self.wall_s += other.wall_s
        self.lag.merge(other.lag)

    def summary(self) -> dict:
        return {
            "cpu_percent": round(self.cpu_percent, 1),
            "loop_lag_p50_s": self.lag.quantile(0.5),
            "loop_lag_p99_s": self.lag.quantile(0.99),
        }


def is_client_bound(summary: dict, cpu_percent_max: float, loop_lag_p99_s_max: float) -> bool:
    """True when CPU % ≥ cpu_percent_max or loop-lag p99 ≥ loop_lag_p99_s_max."""
    lag = summary.get("loop_lag_p99_s") or 0.0
    return summary.get("cpu_percent", 0.0) >= cpu_percent_max or lag >= loop_lag_p99_s_max


class HealthMonitor:
    """Samples loop lag and CPU into per-stage buckets; ``key()`` says which stage is current.

    Deltas since the last ``take_delta()`` are shipped to the master like request stats. The
    latest values are also kept for the exporter (``cpu_percent_now``, ``loop_lag_now_s``).
    """

    def __init__(self, key, interval_s: float = 0.05):
        self._key = key
        self.interval_s = interval_s
        self._pending: dict = {}
        self._greenlet = None
        self.cpu_percent_now = 0.0
        self.loop_lag_now_s = 0.0

    def start(self) -> None:
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def _run(self) -> None:
        interval = self.interval_s
        wall0, cpu0 = time.perf_counter(), time.process_time()
        while True:
            t0 = time.perf_counter()
            gevent.sleep(interval)
            t1 = time.perf_counter()
            cpu1 = time.process_time()
            lag = max(t1 - t0 - interval, 0.0)
            key = self._key()
            h = self._pending.get(key)
            if h is None:
                h = self._pending[key] = StageHealth()
            h.lag.add(max(lag, 1e-6))
            h.cpu_s += cpu1 - cpu0
            h.wall_s += t1 - wall0
            self.loop_lag_now_s = lag
            if t1 > wall0:
                self.cpu_percent_now = 100.0 * (cpu1 - cpu0) / (t1 - wall0)
            wall0, cpu0 = t1, cpu1

    def take_delta(self) -> dict:
        out = {k: h.to_wire() for k, h in self._pending.items()}
        self._pending = {}
        return out
