"""Is a stage over the server's capacity? The server watch's polls judged per stage.

Pure logic, no I/O and no clock: ``StageWatch`` accumulates the ``(t, sample)`` polls it is handed
(``loadgen.server.watch.ServerWatch`` polls ``/metrics`` and feeds it) and says, per stage, what
``OverCapacityRule`` counts as evidence.
"""

from __future__ import annotations

from dataclasses import dataclass


def _max(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


@dataclass(frozen=True)
class OverCapacityRule:
    """When a stage counts as over the server's capacity (scenario ``guard.over_capacity``).

    Evidence a capacity planner accepts, any one of:
    - preemptions (vLLM) / retractions (SGLang) grew during the stage;
    - a sustained queue: waiting >= ``queue_fraction`` x the stage's concurrency (at least 1) in at
      least ``queue_share`` of the stage's polls (and in 2 polls or more);
    - KV cache use >= ``kv_usage`` in at least ``queue_share`` of the polls.
    A closed loop whose users run in step queues briefly at every prefill burst (a request caught
    between arrival and the scheduler's next step): that is neither sustained nor a real fraction.
    """

    queue_fraction: float = 0.1
    queue_share: float = 0.5
    kv_usage: float = 0.98


class StageWatch:
    """Per-stage server-side overload signals from a sequence of ``(t, sample)`` /metrics polls.

    A sample (see ``loadgen.server.replies.watch_sample``) holds ``preemptions_total`` (vLLM
    num_preemptions_total, or SGLang num_retracted_requests_total: requests evicted for lack of
    KV), ``waiting`` (queued requests), ``running`` and ``kv_usage`` (0-1); any may be None.

    Per stage, between ``begin`` and ``end``:
      preemptions   = sum of counter increases since the last poll before the stage began
                      (a decrease is a server restart: the new value counts as the increase)
      waiting_max / running_max / kv_usage_max = largest value polled
      queued_polls_max = longest run of consecutive polls with waiting > 0
      queued_share  = share of polls with waiting >= max(1, queue_fraction x concurrency)
      kv_full_share = share of polls with kv_usage >= rule.kv_usage
      kv_usage_mean = mean of the polled kv_usage values (None without one)
      over_capacity = any evidence of ``OverCapacityRule`` (listed in ``over_capacity_evidence``);
                      None when no poll arrived during the stage (unknown, not "fine")
    """

    def __init__(self, rule: OverCapacityRule | None = None):
        self.rule = rule or OverCapacityRule()
        self._last_counter: float | None = None
        self._index: int | None = None
        self._acc: dict = {}

    def begin(self, index: int, t: float, concurrency: int | None = None) -> None:
        self._index = index
        self._acc = {
            "t0": t,
            "concurrency": concurrency,
            "polls": 0,
            "preemptions": None,
            "waiting_max": None,
            "running_max": None,
            "kv_usage_max": None,
            "run": 0,
            "queued_polls_max": 0,
            "queued_polls": 0,
            "kv_full_polls": 0,
            "kv_sum": 0.0,
            "kv_polls": 0,
        }

    def feed(self, t: float, sample: dict) -> None:
        counter = sample.get("preemptions_total")
        increase = None
        if counter is not None:
            if self._last_counter is not None:
                increase = counter - self._last_counter if counter >= self._last_counter else counter
            self._last_counter = counter
        if self._index is None:
            return  # between stages: only the counter baseline moves
        acc, rule = self._acc, self.rule
        acc["polls"] += 1
        if counter is not None:
            acc["preemptions"] = (acc["preemptions"] or 0) + (increase or 0)
        waiting = sample.get("waiting")
        acc["run"] = acc["run"] + 1 if waiting else 0
        acc["queued_polls_max"] = max(acc["queued_polls_max"], acc["run"])
        if waiting and waiting >= max(1.0, rule.queue_fraction * (acc["concurrency"] or 0)):
            acc["queued_polls"] += 1
        usage = sample.get("kv_usage")
        if usage is not None and usage >= rule.kv_usage:
            acc["kv_full_polls"] += 1
        if usage is not None:
            acc["kv_sum"] += usage
            acc["kv_polls"] += 1
        for key in ("waiting", "running", "kv_usage"):
            acc[key + "_max"] = _max(acc[key + "_max"], sample.get(key))

    def _evidence(self, acc: dict) -> list[str]:
        rule, polls = self.rule, acc["polls"]
        needed = max(2, rule.queue_share * polls)
        out = []
        if acc["preemptions"]:
            out.append(f"preemptions +{int(round(acc['preemptions']))}")
        if acc["queued_polls"] >= needed:
            threshold = max(1.0, rule.queue_fraction * (acc["concurrency"] or 0))
            out.append(f"queue >= {threshold:g} in {acc['queued_polls']} of {polls} polls "
                       f"(waiting max {acc['waiting_max']:g})")
        if acc["kv_full_polls"] >= needed:
            out.append(f"KV use >= {rule.kv_usage:.0%} in {acc['kv_full_polls']} of {polls} polls")
        return out

    def end(self, index: int, t: float) -> dict:
        """The stage's server signals (summary.json ``stages[].server``); 0 polls if never begun."""
        if index != self._index:
            self.begin(index, t)
        acc, self._index = self._acc, None
        preempted, polls = acc["preemptions"], acc["polls"]
        evidence = self._evidence(acc) if polls else []
        return {
            "polls": polls,
            "watched_s": max(0.0, t - acc["t0"]),
            "preemptions": None if preempted is None else int(round(preempted)),
            "waiting_max": acc["waiting_max"],
            "running_max": acc["running_max"],
            "kv_usage_max": acc["kv_usage_max"],
            "queued_polls_max": acc["queued_polls_max"],
            "queued_share": acc["queued_polls"] / polls if polls else None,
            "kv_full_share": acc["kv_full_polls"] / polls if polls else None,
            "kv_usage_mean": acc["kv_sum"] / acc["kv_polls"] if acc["kv_polls"] else None,
            "over_capacity": None if not polls else bool(evidence),
            "over_capacity_evidence": evidence,
        }
