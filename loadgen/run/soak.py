"""The owner's time slices: which slices closed, their rows, and their server and client figures.

``SliceBook`` follows the stage being measured (``stages.slice_s``, docs/soak.md). At every slice
boundary it cuts the server's figures (``cut_server``: ``ServerWatch.cut_slice``) and reads the
client's (``client_now``: ``Fleet.health_now``); ``grace_s`` after the boundary (time for the
workers' reports to bring the slice's last requests: none in a local run) it pops the slice's
statistics from the collector and makes its row (``loadgen.stats.slices.slice_row``). The clock
is a parameter, so the bookkeeping is tested without sleeping.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from loadgen.stats.slices import slice_count, slice_row, slice_span


class SliceBook:
    def __init__(self, slice_s: float, collector, *, grace_s: float = 1.0,
                 cut_server: Callable[[bool], dict | None] | None = None,
                 client_now: Callable[[], dict] | None = None, clock=time.perf_counter):
        self.slice_s, self.collector, self.grace_s, self.clock = slice_s, collector, grace_s, clock
        self.cut_server, self.client_now = cut_server, client_now
        self.rows: list[dict] = []  # every closed slice, in order
        self.stage: int | None = None
        self._open_t = 0.0
        self._window_s: float | None = None  # set when the stage's window closed
        self._cut = 0  # boundaries whose figures were read (slice j's at its end)
        self._next = 0  # the next slice to close
        self._figures: dict[int, tuple[dict | None, dict | None]] = {}

    def opened(self, stage: int) -> None:
        """Stage ``stage``'s window opens now (a previous stage's slices must be closed first)."""
        self.stage, self._open_t, self._window_s = stage, self.clock(), None
        self._cut = self._next = 0
        self._figures = {}
        if self.cut_server is not None:
            self.cut_server(True)

    def window_closed(self, stage: int, window_s: float) -> None:
        """The window closed after ``window_s``: the last slice ends here; its figures are cut now."""
        if stage != self.stage:
            return
        self._window_s = window_s
        self._cut_figures(slice_count(window_s, self.slice_s))

    def _cut_figures(self, upto: int) -> None:
        while self._cut < upto:
            server = self.cut_server(False) if self.cut_server is not None else None
            client = self.client_now() if self.client_now is not None else None
            self._figures[self._cut] = (server, client)
            self._cut += 1

    def tick(self, *, force: bool = False) -> list[dict]:
        """Rows of the slices that closed since the last tick. ``force`` (the run stops): every
        slice begun so far closes now, the one under way as a partial slice."""
        if self.stage is None:
            return []
        elapsed = self.clock() - self._open_t
        if self._window_s is None:
            if force:
                self._window_s = elapsed
                self._cut_figures(slice_count(elapsed, self.slice_s))
            else:
                self._cut_figures(math.floor(elapsed / self.slice_s))
        out = []
        while self._next < self._cut:
            start, duration = slice_span(self._next, self.slice_s, self._window_s)
            if not force and elapsed < start + duration + self.grace_s:
                break
            out.append(self._close(self._next, start, duration))
            self._next += 1
        if self._window_s is not None and self._next >= self._cut:
            self.stage = None  # every slice of the stage is out
        for key in [key for key in self.collector.slices if key[0] != self.stage or key[1] < self._next]:
            del self.collector.slices[key]  # a worker's report later than grace_s: counted in the stage only
        self.rows += out
        return out

    def _close(self, index: int, start: float, duration: float) -> dict:
        stats = self.collector.pop_slice(self.stage, index)
        if self._window_s is not None and index == self._cut - 1:  # the last: what its tolerance held
            for key in sorted(k for k in self.collector.slices if k[0] == self.stage and k[1] > index):
                stats.merge(self.collector.slices.pop(key))
        server, client = self._figures.pop(index, (None, None))
        return slice_row(self.stage, index, start, duration, stats, self.slice_s, server, client)
