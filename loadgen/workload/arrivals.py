"""Open-loop arrival schedules: when each request is due, independent of how the server is doing.

Pure: no I/O, no clock. A schedule is a seeded generator of inter-arrival gaps with mean 1/rate:

- ``constant``: every gap is exactly 1/rate.
- ``poisson``:  gaps ~ Exponential(mean 1/rate) (a Poisson process).
- ``gamma``:    gaps ~ Gamma(shape = burstiness, scale = 1 / (rate x burstiness)), mean 1/rate,
                as vLLM's ``--burstiness`` defines it: 1 is Poisson, < 1 burstier, > 1 more even.
                Coefficient of variation of a gap = 1 / sqrt(burstiness).

Split over ``parts`` load-generating processes (``for_part``), part i of n gets rate/n, so the
offered rates add up to the total exactly:

- poisson: each part an independent Poisson stream of rate/n (the superposition of independent
  Poisson streams is Poisson of the summed rate: the split is exact in distribution);
- constant: part i is offset by i/rate, so the merged stream is again one gap of 1/rate;
- gamma: independent gamma streams of rate/n (the merge of n renewal streams is not itself a gamma
  renewal stream; its rate is exact and its burstiness is close for small n).

The same seed, part and parts give the same schedule: two runs send on the same schedule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ARRIVALS = ("poisson", "constant", "gamma")


@dataclass(frozen=True)
class ArrivalSpec:
    rate_per_s: float
    kind: str = "poisson"
    burstiness: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ARRIVALS:
            raise ValueError(f"arrival must be one of {', '.join(ARRIVALS)}, got {self.kind!r}")
        if not (self.rate_per_s > 0 and math.isfinite(self.rate_per_s)):
            raise ValueError(f"rate must be a finite number > 0 requests/s, got {self.rate_per_s!r}")
        if not (self.burstiness > 0 and math.isfinite(self.burstiness)):
            raise ValueError(f"burstiness must be > 0, got {self.burstiness!r}")

    @classmethod
    def for_stage(cls, rate_per_s: float, kind: str, burstiness: float, seed: int, stage: int | None) -> ArrivalSpec:
        """A stage's arrivals: the scenario's process and burstiness, seeded by (``rate.seed``,
        stage) as ``seed x 100003 + stage``, so two runs with the same seed, rates and processes send
        on the same schedule (the open-loop dispatcher and the what-if both build it here)."""
        return cls(rate_per_s, kind, burstiness, seed=seed * 100_003 + (stage or 0))

    def for_part(self, part: int, parts: int) -> Schedule:
        """The schedule of process ``part`` (0-based) of ``parts``: rate/parts, its own stream."""
        if not 0 <= part < parts:
            raise ValueError(f"part must be in [0, {parts}), got {part}")
        offset_s = part / self.rate_per_s if self.kind == "constant" else 0.0
        return Schedule(self.rate_per_s / parts, self.kind, self.burstiness, (self.seed, part, parts), offset_s)


class Schedule:
    """Due times (seconds from the stage's start) of one process's arrivals, in order."""

    BATCH = 256

    def __init__(self, rate_per_s: float, kind: str, burstiness: float, seed: tuple, offset_s: float = 0.0):
        self.rate_per_s, self.kind, self.burstiness = rate_per_s, kind, burstiness
        self._rng = np.random.default_rng(list(_seed_words(seed)))
        self._next_s = offset_s
        self._buf: list[float] = []
        self._first = True

    def _gaps(self, n: int) -> np.ndarray:
        mean = 1.0 / self.rate_per_s
        if self.kind == "constant":
            return np.full(n, mean)
        if self.kind == "poisson":
            return self._rng.exponential(mean, n)
        return self._rng.gamma(self.burstiness, mean / self.burstiness, n)

    def next_due_s(self) -> float:
        """The next arrival's due time. The first arrival is one gap after the start (offset for
        constant), so a stage starting at t=0 does not send a burst of every process at once."""
        if not self._buf:
            self._buf = self._gaps(self.BATCH).tolist()[::-1]
        gap = self._buf.pop()
        self._next_s += gap
        return self._next_s

    def until(self, end_s: float) -> list[float]:
        """Every due time < ``end_s`` not yet handed out (tests, planning)."""
        out = []
        while True:
            if not self._buf:
                self._buf = self._gaps(self.BATCH).tolist()[::-1]
            if self._next_s + self._buf[-1] >= end_s:
                return out
            out.append(self.next_due_s())


def _seed_words(seed: tuple) -> list[int]:
    return [int(x) & 0xFFFFFFFF for x in seed]


def rates_geometric(start: float, factor: float, maximum: float) -> list[float]:
    """start, start x factor, ... up to maximum (inclusive when hit within rounding)."""
    if not (start > 0 and factor > 1 and maximum >= start):
        raise ValueError("need start > 0, factor > 1 and max >= start")
    out, r = [], float(start)
    while r <= maximum * (1 + 1e-9):
        out.append(round(r, 9))
        r *= factor
    return out


def littles_law_concurrency(rate_per_s: float, mean_duration_s: float) -> float:
    """Expected requests in flight of an open-loop stage: L = lambda x W (Little's law)."""
    return rate_per_s * mean_duration_s


def max_fitting_rate(capacity_tokens: int, tokens_per_request: int, mean_duration_s: float,
                     margin: float) -> float:
    """The largest rate whose Little's-law concurrency fits the KV capacity:
    rate x W x tokens x (1 + margin) <= capacity."""
    return capacity_tokens / (mean_duration_s * tokens_per_request * (1 + margin))
