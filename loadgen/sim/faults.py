"""Seeded fault injection: which request fails, how, and after how many tokens.

Every completion request draws one uniform number; the kinds' rates are stacked in the fixed order
of FAULT_KINDS, so a request gets at most one fault and kind ``k`` hits a fraction ``rate[k]`` of
requests. What each kind does: ``FAULT_MEANINGS``. Pre-stream kinds hit any request; mid-stream
kinds fire after the chunk that brings the tokens sent to ``at_token`` (uniform in 1 .. output - 1),
on streaming requests only (drawn but not injected for non-streaming ones); ``no_done`` at the end.

A request whose stream a fault ends is aborted in the timing model, freeing its batch slot and KV.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

PRE_STREAM = ("http_500", "http_429", "http_503")
MID_STREAM = ("stream_error", "reset", "stall", "malformed", "abort", "truncate", "no_done")
FAULT_KINDS = PRE_STREAM + MID_STREAM
FAULT_MEANINGS = {
    "http_500": "HTTP 500 before the stream, with an OpenAI-style error body",
    "http_429": "HTTP 429 (rate limited) before the stream",
    "http_503": "HTTP 503 (queue full) before the stream",
    "stream_error": "an SSE error event mid-stream, then [DONE]",
    "reset": "a TCP reset mid-stream",
    "stall": "silence mid-stream, the socket held open (see --stall-max-s)",
    "malformed": "one event of invalid JSON mid-stream, then the stream goes on",
    "abort": 'finish_reason "abort" mid-stream, then [DONE]',
    "truncate": "a clean close mid-stream with neither a finish reason nor [DONE]",
    "no_done": "the finish reason, then a close without [DONE]",
}


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
