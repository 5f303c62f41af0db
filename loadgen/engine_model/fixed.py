"""The ``fixed`` timing model: the known-answer model, every request on its own schedule.

Pure: no I/O and no clock; the runner passes simulated time ``t_s``. For a request submitted at
``t0``, chunk ``i`` (0-based) is due at ``t0 + ttft_s + i * itl_s * tokens_per_chunk`` and carries
``tokens_per_chunk`` tokens (the last one what is left). So a client must measure
TTFT = ``ttft_s``, per-chunk gap = ``itl_s * tokens_per_chunk``, per-token ITL = ``itl_s``.
All times are simulated seconds (wall seconds = simulated / ``time_scale``). Requests never queue
or interact; one heap holds every pending chunk, so one runner greenlet serves all streams.

Drift (a soak's known answer): with ``ttft_drift_per_s`` / ``gap_drift_per_s`` (fractions per
simulated second) a request submitted at ``t0`` waits ``ttft_s x (1 + ttft_drift_per_s x t0)`` for
its first chunk, and a chunk due at ``d`` is followed by the next one ``gap x (1 + gap_drift_per_s x
d)`` later: TTFT and ITL grow linearly with the simulated time since the server started.
"""

from __future__ import annotations

import heapq
import itertools

from loadgen.engine_model.engine import ABORTED, RUNNING, EngineStats, SimRequest, emit_tokens


class FixedSchedule:
    """Per-request schedules in one heap. KV use is reported (prompt + generated), never enforced."""

    def __init__(self, ttft_s: float, itl_s: float, tokens_per_chunk: int, ttft_drift_per_s: float = 0.0,
                 gap_drift_per_s: float = 0.0):
        self.ttft_s = ttft_s
        self.ttft_drift_per_s, self.gap_drift_per_s = ttft_drift_per_s, gap_drift_per_s
        self.gap_s = itl_s * tokens_per_chunk
        self.tokens_per_chunk = tokens_per_chunk
        self._heap: list[tuple[float, int, SimRequest]] = []
        self._seq = itertools.count()
        self.num_running = 0
        self.num_waiting = 0
        self.kv_used = 0
        self.stats = EngineStats()

    def submit(self, req: SimRequest, t_s: float) -> None:
        req.state = RUNNING
        self.num_running += 1
        self.kv_used += req.prompt_tokens
        heapq.heappush(self._heap, (t_s + self.ttft_s * (1 + self.ttft_drift_per_s * t_s), next(self._seq), req))

    def abort(self, req: SimRequest) -> None:
        """Forget ``req``; its heap entry is dropped lazily when it comes due."""
        if req.state == RUNNING:
            req.state = ABORTED
            self._release(req)

    def _release(self, req: SimRequest) -> None:
        self.num_running -= 1
        self.kv_used -= req.prompt_tokens + req.generated

    def next_due(self) -> float | None:
        """Simulated time of the earliest pending chunk, or None when nothing is pending."""
        heap = self._heap
        while heap and heap[0][2].state != RUNNING:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def pop_due(self, t_s: float) -> list[tuple[SimRequest, int, bool]]:
        """Every chunk due at or before ``t_s``: [(request, tokens, finished), ...]."""
        heap, events = self._heap, []
        while heap and heap[0][0] <= t_s:
            due, _, req = heapq.heappop(heap)
            if req.state != RUNNING:
                continue
            if req.generated == 0:
                self.stats.prompt_tokens_total += req.prompt_tokens
            n = min(self.tokens_per_chunk, req.output_tokens - req.generated)
            self.kv_used += n
            if emit_tokens(req, n, self.stats, events):
                self._release(req)
            else:
                # From the schedule, not from t_s: lateness must not accumulate.
                heapq.heappush(heap, (due + self.gap_s * (1 + self.gap_drift_per_s * due), next(self._seq), req))
        return events
