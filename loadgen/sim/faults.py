"""Seeded fault injection: which request fails, how, and after how many tokens.

Every completion request draws one uniform number; the kinds' rates are stacked in the fixed order
of FAULT_KINDS, so a request gets at most one fault and kind ``k`` hits a fraction ``rate[k]`` of
requests. Kinds:

- before the stream (any request): ``http_500``, ``http_429``, ``http_503`` -> that HTTP status
  with an OpenAI-style ``{"error": {...}}`` body.
- mid-stream (streaming requests only; drawn but not injected for non-streaming ones): after the
  chunk that brings the tokens sent to ``at_token`` (uniform in 1 .. output - 1):
  ``stream_error`` (error event, then ``[DONE]``), ``reset`` (TCP RST), ``stall`` (no more bytes,
  socket held open), ``malformed`` (one event with invalid JSON, then the stream goes on),
  ``abort`` (``finish_reason: "abort"``, then ``[DONE]``), ``truncate`` (clean close with neither
  a finish reason nor ``[DONE]``).
- at the end: ``no_done`` (finish reason sent, then close without ``[DONE]``).

A request whose stream a fault ends is aborted in the timing model, freeing its batch slot and KV.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

PRE_STREAM = ("http_500", "http_429", "http_503")
MID_STREAM = ("stream_error", "reset", "stall", "malformed", "abort", "truncate", "no_done")
FAULT_KINDS = PRE_STREAM + MID_STREAM


@dataclass(frozen=True)
class FaultDraw:
    kind: str
    at_token: int  # fire after the chunk that makes tokens sent >= at_token


class FaultPlan:
    def __init__(self, rates: dict[str, float], seed: int):
        self._stack: list[tuple[float, str]] = []
        acc = 0.0
        for kind in FAULT_KINDS:
            rate = rates.get(kind, 0.0)
            if rate > 0:
                acc += rate
                self._stack.append((acc, kind))
        self._rng = random.Random(seed ^ 0x5EED)

    def draw(self, output_tokens: int) -> FaultDraw | None:
        """The fault of the next request, or None. ``output_tokens`` >= 1."""
        if not self._stack:
            return None
        u = self._rng.random()
        for edge, kind in self._stack:
            if u < edge:
                if kind == "no_done":
                    return FaultDraw(kind, output_tokens)
                return FaultDraw(kind, self._rng.randint(1, max(1, output_tokens - 1)))
        return None
