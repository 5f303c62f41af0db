"""The stop of a distributed run: every live worker's final report is in before any result is final.

Locust 2.47's ``MasterRunner.quit`` sends ``quit`` to the workers and waits ``gevent.sleep(0.5)``
for their final reports, then stops listening. Over a slow link, or from busy workers, those
reports come later and everything since a worker's last periodic report (up to 3 s of samples, and
the requests its stop cut) is missing from the master's totals while the worker's ledger has it.

So every stop of a master goes through ``FinalReports.stop``, before Locust's quit and before
anything final is written: the sweep's end (the shape calls quit), Ctrl-C / SIGTERM, a fatal
error, ``--run-time``, Locust's ``quitting``. It stops the shape and spawning (Locust's own first
step of quit, without telling the workers), sends ``llm_final`` to every live worker, and waits
until each one's ``llm_final_report`` arrived, the worker went missing, or

    deadline_s = FINAL_REPORT_WAIT_S + --stop-timeout + the slowest round trip measured

passed (its users may take ``--stop-timeout`` to stop; the round trip is the phase echo of
``loadgen.fleet.distributed``). A worker, asked, stops its users (each request the stop cuts is counted,
``cancelled_requests``), fires Locust's ``report_to_master`` (Locust's stats and loadgen's report
with its last delta) and sends that payload; the master merges it as a ``worker_report``. Workers
whose report did not come are named in a warning and booked as lost at the stop
(``loadgen.fleet.worker_loss``, ``reason = "no_final_report"``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import gevent

log = logging.getLogger("llm_loadgen")

FINAL_MESSAGE = "llm_final"  # master -> workers, at a stop: stop your users, send your final report
FINAL_REPORT_MESSAGE = "llm_final_report"  # worker -> master: Locust's report payload, then
FINAL_REPORT_WAIT_S = 5.0  # plus the slowest round trip and --stop-timeout


class FinalReports:
    """Master: the stop's collection of final reports (module docstring); who sent, who did not."""

    def __init__(self, runner, live_workers: Callable[[], list[str]], clock=time.monotonic, sleep=gevent.sleep):
        self.runner, self.live_workers, self.clock, self.sleep = runner, live_workers, clock, sleep
        self.rtt_s: dict[str, float] = {}  # round trip master -> worker -> master, per worker
        self.received: set[str] = set()  # workers whose final report arrived
        self.missing: set[str] = set()  # live at the stop, no final report within the deadline
        self.waited_s: float | None = None
        self.collecting = self.done = False

    def round_trip(self, client_id: str, now: float, sent_t: float, held_s: float) -> None:
        """A report echoed the phase message the master sent at ``sent_t`` (its clock), held
        ``held_s`` by the worker: the round trip is ``now - sent_t - held_s``."""
        self.rtt_s[client_id] = max(now - sent_t - held_s, 0.0)

    def stop(self, poll_s: float = 0.05) -> None:
        """Once: stop the shape, ask every live worker for its final report, wait for them. A
        call while the collection runs returns at once: Locust's listener greenlet calls quit
        when the last worker leaves, and must not block the reports it delivers."""
        if self.collecting or self.done:
            return
        self.collecting = True
        try:
            self.runner.stop(send_stop_to_client=False)
            self._collect(self.runner.environment.stop_timeout or 0.0, poll_s)
        finally:
            self.collecting, self.done = False, True

    def _collect(self, stop_timeout_s: float, poll_s: float) -> None:
        waiting = [c for c in self.live_workers() if c not in self.received]
        if not waiting:
            return
        for cid in waiting:
            self.runner.send_message(FINAL_MESSAGE, None, client_id=cid)
        t0 = self.clock()
        deadline_s = FINAL_REPORT_WAIT_S + stop_timeout_s + max(self.rtt_s.get(c, 0.0) for c in waiting)
        try:
            while self.clock() - t0 < deadline_s:
                live = set(self.live_workers())
                if not [c for c in waiting if c not in self.received and c in live]:
                    break
                self.sleep(poll_s)
        finally:  # also when cut short (a second Ctrl-C): what did not come is missing
            self.waited_s = self.clock() - t0
            self.missing.update(c for c in waiting if c not in self.received)
        if self.missing:
            log.warning("llm-loadgen: warning: no final report within %.1f s of the stop from %d of %d workers: %s; "
                        "what they did since their last report is missing from summary.json (run.worker_losses "
                        "books it)", self.waited_s, len(self.missing), len(waiting), ", ".join(sorted(self.missing)))
        else:
            log.info("llm-loadgen: final reports from %d workers in %.2f s", len(waiting), self.waited_s)


def install_final_reports(runner, is_master: bool, finals: FinalReports | None) -> None:
    """Master (``finals`` given): merge final reports, and route Locust's quit through
    ``finals.stop``. Worker: answer ``llm_final`` once."""
    if is_master:
        locust_quit = runner.quit

        def _on_final_report(environment, msg, **_):
            environment.events.worker_report.fire(client_id=msg.node_id, data=msg.data)
            finals.received.add(msg.node_id)

        def quit_after_final_reports() -> None:
            if finals.collecting:
                return  # the collecting caller quits once the collection is over
            finals.stop()
            locust_quit()

        runner.register_message(FINAL_REPORT_MESSAGE, _on_final_report)
        runner.quit = quit_after_final_reports
        return
    sent = []

    def _on_final(environment, msg, **_):
        if sent:
            return
        sent.append(True)
        runner.stop()  # every user stopped: the requests cut now are counted as cancelled
        data: dict = {}
        environment.events.report_to_master.fire(client_id=runner.client_id, data=data)
        runner.send_message(FINAL_REPORT_MESSAGE, data)

    runner.register_message(FINAL_MESSAGE, _on_final)
