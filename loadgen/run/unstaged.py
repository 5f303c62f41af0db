"""Requests the run sends outside its stages, and the server's reasons said once.

``ProbeLedger`` (owning process only) accounts for the start check's probe requests
(``loadgen.server.start_check``) and the open-loop guard's duration probe: counted ones are requests of the
run (its totals count them, and so do Locust's own statistics, so both agree with the server's
counters); a refusal the start check adapted away is only listed. summary.json ``preflight`` is
``outcomes`` plus the totals of ``stats``. ``FailureNotices`` prints each distinct server reason
once, when the merged totals first hold it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from loadgen.server.start_check import PATHS, PROBE_OUTPUT_TOKENS
from loadgen.stats.failures import LocustFailure, locust_name
from loadgen.stats.stage_stats import StageStats


class ProbeLedger:
    def __init__(self, rt):
        self.rt = rt
        self.stats = StageStats()  # the counted probes (also in the run's totals)
        self.outcomes: list[str] = []  # every probe: its failure kind or "ok", "(adapted)" if not counted
        self._locust_pending: list[tuple] = []  # counted probes not yet in Locust's statistics

    def count(self, probes: tuple, expected_out: int = PROBE_OUTPUT_TOKENS) -> None:
        """``probes``: (records.RequestResult, counted) pairs."""
        rt = self.rt
        for result, counted in probes:
            if not result.ok:
                result.error_message = rt.redact(result.error_message)
            self.outcomes.append((result.error_kind or "ok") + ("" if counted else " (adapted)"))
            if not counted:
                continue
            rt.collector.record_result(result, None, rt.scenario.input_tokens, expected_out)
            self.stats.add_result(result, rt.scenario.input_tokens, expected_out)
            self._locust_pending.append((result, time.time() - result.e2e_s))

    def flush_to_locust(self) -> None:
        """Hand the counted probes to Locust's statistics. Not from the tick that ran the start
        check: Locust clears its statistics when the first users start, right after that tick."""
        path = PATHS[self.rt.scenario.endpoint]
        while self._locust_pending:
            result, start_wall = self._locust_pending.pop(0)
            failure = None if result.ok else LocustFailure(locust_name(result.error_kind, result.error_status))
            self.rt.environment.events.request.fire(
                request_type="POST", name=path, response_time=result.e2e_s * 1000.0, response_length=0,
                response=None, context={"stage": None, "probe": True}, exception=failure,
                start_time=start_wall, url=path)


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
