"""The run's console lines in stage order, the headless progress line, and the server's reasons said once.

Pure apart from the ``say`` it is handed (one line out). A stage's row is printed when its last
request finishes, during the next stage's ramp or warmup; lines about what comes next (that stage's
ramp, a guard refusal) are held until the earlier rows are out, so the console reads in stage order.
"""

from __future__ import annotations

from collections.abc import Callable

from loadgen.errors import short_kind
from loadgen.phases import Phase
from loadgen.stats.failures import locust_name

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

    def progress(self, now: float, stage: int | None, kind: Phase, load: str | None, stats,
                 open_t: float | None, rows_pending: bool, inflight: int | None = None) -> None:
        """Every PROGRESS_EVERY_S of a phase that lasts that long (never while a row is pending):
        ``progress_line`` for the stage of ``load`` (its label: ``C=8`` or ``8 req/s``) with
        ``inflight`` requests in flight now and, while measuring, the window so far (``stats``
        since ``open_t``)."""
        if now - self._phase_t < PROGRESS_EVERY_S or now - self._progress_t < PROGRESS_EVERY_S:
            return
        if stage is None or kind in (Phase.IDLE, Phase.DONE) or rows_pending:
            return
        self._progress_t = now
        window_s = now - open_t if kind is Phase.MEASURE and open_t is not None and stats is not None else None
        self.say(progress_line(stage, load, kind, now - self._phase_t, inflight, stats, window_s))


def progress_line(stage: int, load: str | None, kind: Phase, phase_s: float, inflight: int | None,
                  stats=None, window_s: float | None = None) -> str:
    """``stage k <load>: <phase> <s in it> s, <n> in flight`` (``load``: ``C=8`` or ``8 req/s``,
    ``StageInfo.label``); with a window (``stats`` of the ``window_s`` so far) also its ok requests
    and errors, or "none finished yet" while none has (users in step: every request is still
    running), and output tok/s = window output tokens / window_s (tokens count as they arrive)."""
    line = f"llm-loadgen: stage {stage} {load or '?'}: {kind} {phase_s:.0f} s"
    if inflight is not None:
        line += f", {inflight:,} in flight"
    if window_s is not None:
        done = (f"{stats.requests_ok:,} ok, {stats.error_count:,} errors" if stats.requests_ok or stats.error_count
                else "none finished yet")
        line += f", {done}, {stats.window_output_tokens / max(window_s, 1e-9):,.0f} out tok/s so far"
    return line


class FailureNotices:
    def __init__(self, rt, say: Callable[[str], None]):
        self.rt, self.say = rt, say
        self._said: set[tuple] = set()

    def say_new(self) -> None:
        """Each distinct server reason once (merged from every process), API key redacted."""
        for kind, entries in self.rt.collector.totals.failures.samples.items():
            for status, text, _ in entries:
                if (kind, status, text) not in self._said:
                    self._said.add((kind, status, text))
                    self.say(self.rt.redact(f"llm-loadgen: failed request ({locust_name(kind, status)}): {text}"))


def drift_line(stage: int, row: dict) -> str:
    """A sliced stage's drift verdict (``loadgen.stats.drift``), one line."""
    return f"llm-loadgen: stage {stage}: {row['drift']['verdict']}"


def slice_line(row: dict, load: str | None, window_plan_s: float) -> str:
    """One closed time slice (docs/soak.md): ``stage k <load> slice j: <end>/<planned window> s,
    <tok/s>, TTFT p99 <ms>, <errors>``; a p99 of few requests is marked ``~`` (``few_samples``)."""
    end_s = row["start_s"] + row["duration_s"]
    tps = row.get("output_tokens_per_s")
    p99 = row.get("ttft_p99_s")
    ttft = "-" if p99 is None else f"{'~' if row.get('few_samples') else ''}{p99 * 1000:,.0f} ms"
    errors = row.get("error_count") or 0
    kinds = " ".join(f"{short_kind(k)}:{n}" for k, n in (row.get("errors") or {}).items())
    return (f"llm-loadgen: stage {row['stage']} {load or '?'} slice {row['slice']}: {end_s:,.0f}/{window_plan_s:,.0f} s, "
            f"{'-' if tps is None else f'{tps:,.0f}'} tok/s, TTFT p99 {ttft}, {row['requests']:,} ok, "
            f"{errors:,} errors{f' ({kinds})' if kinds else ''}")
