"""Client health: CPU use and event-loop lag of a load-generating process, per stage.

A load generator that is itself the bottleneck reports its own delays as the server's TTFT and
ITL. Every process that runs users samples, every ``interval_s`` (50 ms):

- loop lag = actual sleep − interval_s, for a greenlet that asked to sleep interval_s. Every
  greenlet that is ready to run (a stream whose bytes arrived) waits for its turn in the same way,
  so its timestamps are late by about this much: the lag is the client's own timing error.
- CPU % = process CPU seconds / wall seconds × 100 over the stage (100 = one core busy). One
  gevent process cannot use more than one core; near 100% every new byte waits in the kernel
  for the loop to come round.

A stage is *client-bound* when CPU % ≥ ``cpu_percent_max`` or the loop-lag p99 ≥
``loop_lag_p99_s_max`` in any load-generating process (the worst process decides).

For the exporter's live gauges the monitor also keeps ``cpu_percent_now`` (CPU % over the last
``now_window_s``) and ``loop_lag_now_s`` (the worst lag over the last ``now_window_s``): a
scrape every 5-15 s then still sees a lag spike, and the CPU gauge does not flicker between 0 and
100 as a single 50 ms sample would.
"""

from __future__ import annotations

import gc
import time
from collections import deque

import gevent

from loadgen.stats.hist import LogHistogram


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

    def to_message(self) -> dict:
        return {"cpu_s": self.cpu_s, "wall_s": self.wall_s, "lag": self.lag.to_message()}

    @classmethod
    def from_message(cls, d: dict) -> StageHealth:
        h = cls()
        h.cpu_s, h.wall_s, h.lag = d["cpu_s"], d["wall_s"], LogHistogram.from_message(d["lag"])
        return h

    def merge(self, other: StageHealth) -> None:
        """Add another delta of the *same* process (CPU and wall add; lag samples add)."""
        self.cpu_s += other.cpu_s
        self.wall_s += other.wall_s
        self.lag.merge(other.lag)

    def summary(self) -> dict:
        """{"cpu_percent" (1 decimal), "loop_lag_p50_s", "loop_lag_p99_s" (None without samples)}."""
        return {
            "cpu_percent": round(self.cpu_percent, 1),
            "loop_lag_p50_s": self.lag.quantile(0.5),
            "loop_lag_p99_s": self.lag.quantile(0.99),
        }


def settle_heap() -> None:
    """Keep the garbage collector's full passes out of the measured windows.

    A process with hundreds of users holds ~10^5-10^6 long-lived objects (users, greenlets,
    sockets, histograms); each full collection walks them all, a 40-120 ms pause of the event loop
    with 1024 users: bytes that arrive then are stamped late, read as TTFT/ITL and flag the stage
    ``client_bound``. Called as a stage's warmup starts (its users are spawned, nothing counts
    yet): one collection now, then ``gc.freeze()`` moves every survivor to the permanent
    generation, which later collections skip. What a stage allocates per request is short-lived
    and still collected by the young generations. The previous stage's frozen objects are
    unfrozen first, so the one collection also frees those that died since (users a smaller
    SLO-search stage stopped): freezing never keeps garbage longer than one stage."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def is_client_bound(summary: dict, cpu_percent_max: float, loop_lag_p99_s_max: float) -> bool:
    """True when CPU % ≥ cpu_percent_max or loop-lag p99 ≥ loop_lag_p99_s_max."""
    lag = summary.get("loop_lag_p99_s") or 0.0
    cpu = summary.get("cpu_percent") or 0.0
    return cpu >= cpu_percent_max or lag >= loop_lag_p99_s_max


def stage_client_bound(client: dict, lateness_p99_s: float | None, check) -> bool:
    """A stage's ``client_bound`` flag: the load-generating processes' health (``client``, from
    ``worst_of``; no CPU figure -> not judged) is over ``check``'s limits (``is_client_bound``), or,
    open loop, the send lateness p99 >= ``check.lateness_p99_s_max`` (the schedule slipped).
    ``check`` is the scenario's ``client_check``."""
    judged = client.get("cpu_percent") is not None and is_client_bound(
        client, check.cpu_percent_max, check.loop_lag_p99_s_max)
    return judged or (lateness_p99_s is not None and lateness_p99_s >= check.lateness_p99_s_max)


def worst_of(summaries: list[dict]) -> dict:
    """Combine the ``StageHealth.summary()`` of several processes into one judged by the worst.

    Each field is the maximum over the processes *separately* (highest CPU %, highest lag p50,
    highest lag p99), plus ``processes``: a process with a long lag but little CPU (descheduled
    by the OS, one hogging greenlet) must not hide behind another with more CPU and no lag.
    Empty input: every field None, ``processes`` 0.
    """
    if not summaries:
        return {"cpu_percent": None, "loop_lag_p50_s": None, "loop_lag_p99_s": None, "processes": 0}

    def top(field: str):
        values = [s[field] for s in summaries if s.get(field) is not None]
        return max(values) if values else None

    return {"cpu_percent": top("cpu_percent"), "loop_lag_p50_s": top("loop_lag_p50_s"),
            "loop_lag_p99_s": top("loop_lag_p99_s"), "processes": len(summaries)}


class HealthMonitor:
    """Samples loop lag and CPU into per-stage buckets; ``key()`` says which stage is current.

    Deltas since the last ``take_delta()`` are shipped to the master like request stats. The
    clocks are parameters so the bookkeeping (``observe``) can be tested without sleeping.
    """

    def __init__(self, key, interval_s: float = 0.05, now_window_s: float = 5.0, *,
                 clock=time.perf_counter, cpu_clock=time.process_time, sleep=gevent.sleep):
        if interval_s <= 0:
            raise ValueError(f"health interval_s must be > 0, got {interval_s}")
        self._key = key
        self.interval_s = interval_s
        self.now_window_s = now_window_s
        self._clock, self._cpu_clock, self._sleep = clock, cpu_clock, sleep
        self._pending: dict = {}
        self._greenlet = None
        self._last: tuple[float, float] | None = None  # (wall, cpu) of the previous sample
        self._recent: deque = deque()  # (wall, cpu, lag) of the samples in the last now_window_s
        self.cpu_percent_now = 0.0
        self.loop_lag_now_s = 0.0

    def start(self) -> None:
        if self._greenlet is None:
            self._last = (self._clock(), self._cpu_clock())
            self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def _run(self) -> None:
        interval, clock, sleep = self.interval_s, self._clock, self._sleep
        while True:
            t0 = clock()
            sleep(interval)
            self.observe(t0, clock(), self._cpu_clock())

    def observe(self, asked_at: float, woke_at: float, cpu: float) -> None:
        """One sample: a sleep of ``interval_s`` asked at ``asked_at`` returned at ``woke_at``;
        ``cpu`` = process CPU seconds at ``woke_at``.

        lag = max(woke_at − asked_at − interval_s, 0). The CPU and wall time since the previous
        sample go to the stage ``key()`` names now.
        """
        # without start() there is no CPU reading from before this sleep: count its lag only
        wall0, cpu0 = self._last if self._last is not None else (woke_at, cpu)
        lag = max(woke_at - asked_at - self.interval_s, 0.0)
        key = self._key()
        h = self._pending.get(key)
        if h is None:
            h = self._pending[key] = StageHealth()
        h.lag.add(max(lag, 1e-6))  # the histogram starts at 1 µs; 0 lag lands in its first bucket
        h.cpu_s += cpu - cpu0
        h.wall_s += woke_at - wall0
        self._last = (woke_at, cpu)
        self._update_now(woke_at, cpu, lag, wall0, cpu0)

    def _update_now(self, t: float, cpu: float, lag: float, wall0: float, cpu0: float) -> None:
        """cpu_percent_now = Δcpu / Δwall × 100 since the oldest sample kept (≤ now_window_s ago,
        else the previous sample); loop_lag_now_s = the worst lag among the kept samples."""
        recent = self._recent
        recent.append((t, cpu, lag))
        while len(recent) > 1 and t - recent[0][0] > self.now_window_s:
            recent.popleft()
        t_a, cpu_a, _ = recent[0]
        if t_a >= t:  # only this sample is kept: measure from the previous one
            t_a, cpu_a = wall0, cpu0
        if t > t_a:
            self.cpu_percent_now = 100.0 * (cpu - cpu_a) / (t - t_a)
        self.loop_lag_now_s = max(s[2] for s in recent)

    def take_delta(self) -> dict:
        """{stage key: StageHealth wire} of everything sampled since the previous call."""
        out = {k: h.to_message() for k, h in self._pending.items()}
        self._pending = {}
        return out
