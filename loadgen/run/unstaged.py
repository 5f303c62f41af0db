"""Requests the run sends outside its stages.

``UnstagedRequests`` (owning process only) accounts for the start check's probe requests
(``loadgen.server.start_check``) and the open-loop guard's duration sample
(``loadgen.run.stage_guard``): counted ones are requests of the run (its totals count them, and so
do Locust's own statistics, so both agree with the server's counters); a refusal the start check
adapted away is only listed. summary.json ``preflight`` is ``outcomes`` plus the totals of ``stats``.
"""

from __future__ import annotations

import time

from loadgen.server.start_check import PROBE_OUTPUT_TOKENS
from loadgen.stats.failures import LocustFailure, locust_name
from loadgen.stats.request_line import PROBE
from loadgen.stats.stage_stats import StageStats
from loadgen.wire.endpoints import PATHS


class UnstagedRequests:
    def __init__(self, rt):
        self.rt = rt
        self.stats = StageStats()  # the counted requests (also in the run's totals)
        self.outcomes: list[str] = []  # every request: its failure kind or "ok", "(adapted)" if not counted
        self._locust_pending: list[tuple] = []  # counted requests not yet in Locust's statistics

    def count(self, sent: tuple, expected_out: int = PROBE_OUTPUT_TOKENS) -> None:
        """``sent``: (records.RequestResult, counted) pairs."""
        rt = self.rt
        for result, counted in sent:
            if not result.ok:
                result.error_message = rt.redact(result.error_message)
            self.outcomes.append((result.error_kind or "ok") + ("" if counted else " (adapted)"))
            if not counted:
                continue
            rt.collector.record_result(result, None, rt.scenario.input_tokens, expected_out)
            rt.export_request(result, None, rt.scenario.input_tokens, phase=PROBE)
            self.stats.add_result(result, rt.scenario.input_tokens, expected_out)
            self._locust_pending.append((result, time.time() - result.e2e_s))

    def flush_to_locust(self) -> None:
        """Hand the counted requests to Locust's statistics. Not from the tick that ran the start
        check: Locust clears its statistics when the first users start, right after that tick."""
        path = PATHS[self.rt.scenario.endpoint]
        while self._locust_pending:
            result, start_wall = self._locust_pending.pop(0)
            failure = None if result.ok else LocustFailure(locust_name(result.error_kind, result.error_status))
            self.rt.environment.events.request.fire(
                request_type="POST", name=path, response_time=result.e2e_s * 1000.0, response_length=0,
                response=None, context={"stage": None, "unstaged": True}, exception=failure,
                start_time=start_wall, url=path)
