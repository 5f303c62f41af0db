"""Request length distributions: how many input and output tokens each request asks for.

Pure: no I/O, no clock; seeded. A ``LengthDist`` draws integers, clamped to [min, max]:

- ``fixed``:     always ``value`` (the default: 1000 in, 1000 out)
- ``uniform``:   uniform integers in [min, max]
- ``normal``:    round(Normal(mean, std)), clamped
- ``lognormal``: round(LogNormal with the given arithmetic ``mean`` and ``std``), clamped; the
                 parameters of the underlying normal are sigma^2 = ln(1 + std^2/mean^2),
                 mu = ln(mean) - sigma^2/2
- empirical (input, output) pairs, a joint distribution: a dataset of ``input_tokens`` /
  ``output_tokens`` lines (loadgen.workload.dataset), not a distribution here

Clamping moves the mean of normal/lognormal when much of the mass lies outside [min, max];
``LengthDist.describe()`` says what was asked, the report shows what was sent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

KINDS = ("fixed", "uniform", "normal", "lognormal")


@dataclass(frozen=True)
class LengthDist:
    kind: str = "fixed"
    value: int | None = None  # fixed
    mean: float | None = None  # normal, lognormal
    std: float | None = None
    min: int = 1
    max: int | None = None  # None: no upper clamp (uniform needs one)

    def problems(self) -> list[tuple[str, object, str]]:
        """(field, value, what is wrong + fix) for every bad field; empty when valid."""
        out: list[tuple[str, object, str]] = []
        if self.kind not in KINDS:
            return [("kind", self.kind, f"must be one of {', '.join(KINDS)} (an empirical list of (input, output) "
                                        "pairs: --dataset with input_tokens and output_tokens lines)")]
        if self.min < 1:
            out.append(("min", self.min, "must be >= 1"))
        if self.max is not None and self.max < self.min:
            out.append(("max", self.max, f"must be >= min ({self.min})"))
        if self.kind == "fixed" and (self.value is None or self.value < 1):
            out.append(("value", self.value, "must be an integer >= 1 for a fixed length"))
        if self.kind == "uniform" and self.max is None:
            out.append(("max", None, "is required for a uniform length, e.g. min: 100, max: 1000"))
        if self.kind in ("normal", "lognormal"):
            if self.mean is None or not self.mean > 0:
                out.append(("mean", self.mean, "must be > 0"))
            if self.std is None or not self.std >= 0:
                out.append(("std", self.std, "must be >= 0"))
        return out

    @property
    def upper(self) -> int | None:
        """The largest length this can draw (None: unbounded)."""
        return self.value if self.kind == "fixed" else self.max

    def describe(self) -> str:
        if self.kind == "fixed":
            return str(self.value)
        if self.kind == "uniform":
            return f"uniform {self.min}..{self.max}"
        clamp = f", clamped {self.min}..{self.max if self.max is not None else 'inf'}"
        return f"{self.kind} mean {self.mean:g} std {self.std:g}{clamp}"

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "fixed":
            return np.full(n, self.value, dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(self.min, self.max + 1, n)
        if self.kind == "normal":
            x = rng.normal(self.mean, self.std, n)
        else:
            sigma2 = math.log(1 + (self.std / self.mean) ** 2)
            x = rng.lognormal(math.log(self.mean) - sigma2 / 2, math.sqrt(sigma2), n)
        hi = self.max if self.max is not None else np.iinfo(np.int64).max
        return np.clip(np.rint(x), self.min, hi).astype(np.int64)


class LengthSampler:
    """(input, output) lengths one at a time from two independent distributions, seeded.

    Draws ``BATCH`` inputs then ``BATCH`` outputs at a time and keeps them as two int64 arrays
    (16 bytes a pair; a list of Python int pairs is ~120), since every user holds one. Two fixed
    lengths draw nothing (and make no generator)."""

    BATCH = 512

    def __init__(self, inputs: LengthDist, outputs: LengthDist, seed: tuple):
        self.inputs, self.outputs = inputs, outputs
        self._fixed = (inputs.value, outputs.value) if inputs.kind == outputs.kind == "fixed" else None
        self._rng = None if self._fixed else np.random.default_rng([int(x) & 0xFFFFFFFF for x in seed])
        self._ins = self._outs = np.empty(0, dtype=np.int64)
        self._i = 0

    def next(self) -> tuple[int, int]:
        if self._fixed is not None:
            return self._fixed
        if self._i == len(self._ins):
            self._ins = self.inputs.draw(self._rng, self.BATCH)
            self._outs = self.outputs.draw(self._rng, self.BATCH)
            self._i = 0
        i = self._i
        self._i += 1
        return int(self._ins[i]), int(self._outs[i])
