"""The run's console lines in stage order, and the headless progress line.

Pure apart from the ``say`` it is handed (one line out). A stage's row is printed when its last
request finishes, during the next stage's ramp or warmup; lines about what comes next (that stage's
ramp, a guard refusal) are held until the earlier rows are out, so the console reads in stage order.
"""

from __future__ import annotations

from collections.abc import Callable

from loadgen.phases import Phase

PROGRESS_EVERY_S = 30.0  # a progress line every this many seconds of a phase that lasts that long


class StageConsole:
    def __init__(self, say: Callable[[str], None]):
        self.say = say
        self._held: list[str] = []
        self._phase_t = 0.0  # run clock (s): the current phase began
        self._progress_t = 0.0  # run clock (s): the last progress line

    def phase_started(self, now: float) -> None:
        self._phase_t = now

    def notice(self, line: str, rows_pending: bool) -> None:
        """Say ``line`` now, or once the pending rows are printed (``flush``)."""
        if rows_pending:
            self._held.append(line)
        else:
            self.say(line)

    def flush(self) -> None:
        for line in self._held:
            self.say(line)
        self._held.clear()

    def progress(self, now: float, stage: int | None, kind: Phase, concurrency: int | None, stats,
                 open_t: float | None, rows_pending: bool) -> None:
        """Every PROGRESS_EVERY_S of a phase that lasts that long (never while a row is pending):
        ``stage k C=c: <phase> <s in it> s``; while measuring also the window so far: requests,
        errors and output tok/s = window output tokens / (now - window open)."""
        if now - self._phase_t < PROGRESS_EVERY_S or now - self._progress_t < PROGRESS_EVERY_S:
            return
        if stage is None or kind in (Phase.IDLE, Phase.DONE) or rows_pending:
            return
        self._progress_t = now
        line = f"llm-loadgen: stage {stage} C={concurrency if concurrency is not None else '?'}: {kind} " \
               f"{now - self._phase_t:.0f} s"
        if kind is Phase.MEASURE and open_t is not None and stats is not None:
            window_s = max(now - open_t, 1e-9)
            line += (f", {stats.requests_ok:,} requests, {stats.error_count:,} errors, "
                     f"{stats.window_output_tokens / window_s:,.0f} out tok/s so far")
        self.say(line)
