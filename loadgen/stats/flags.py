"""Stage flags: the one declaration of every flag a stage row can carry, and its legend.

Pure. ``FLAGS`` is the table; the console legend (printed after the final table), report.html's
legend and the table in docs/sweep.md derive from it (a test keeps the page equal to it), and
``results.stage_row`` sets only keys declared here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Flag:
    key: str  # as in summary.json stages[].flags, stages.csv, the console and the web UI
    meaning: str  # one line: what happened, and what it means for the stage's figures


FLAGS: tuple[Flag, ...] = (
    Flag("knee", "the saturation knee: beyond it, doubling concurrency adds less than knee.threshold "
         "output tok/s; in a rate sweep, the highest offered rate the server sustained"),
    Flag("guard_clamped", "the KV guard lowered this last stage's concurrency (or rate) to the most that "
         "fits (guard.action clamp)"),
    Flag("guard_warn", "run although its projected KV use exceeds the capacity (guard.action warn): "
         "expect queueing or preemption"),
    Flag("server_over_capacity", "the server's /metrics showed preemptions/retractions, a sustained "
         "queue or a full KV cache; evidence in the stage's server.over_capacity_evidence"),
    Flag("replica_skew", "a replica served over replicas.share_ratio_max times its fair share of the requests, "
         "or under its inverse (replicas.NAME.flags)"),
    Flag("replica_slow", "a replica's TTFT or TPOT p50 exceeded replicas.slow_ratio times the other replicas' "
         "median (replicas.NAME.flags)"),
    Flag("client_bound", "the load generator's CPU or event-loop lag passed client_check: TTFT/ITL "
         "include client delays; add workers"),
    Flag("clocks_disagree", "the client's TTFT exceeds the server's own (over about the same requests) by more "
         "than network and loop lag explain; cause in breakdown.disagreement"),
    Flag("server_restarted", "the server's process_start_time_seconds changed in the window: its counters "
         "restarted, and its window figures count from the restart"),
    Flag("worker_lost", "a worker stopped reporting during the stage; its running requests are "
         "missing (lost_requests)"),
    Flag("drain_timeout", "requests still ran when stages.drain_s ended; they are not counted "
         "(unfinished_requests)"),
    Flag("warmup_capped", "the warmup hit stages.max_warmup_s before every stream turned over once: the window "
         "began before the steady state (open loop: achieved rate biased low)"),
    Flag("users_short", "fewer users ran than the stage's concurrency when its window closed"),
    Flag("slo_fail", "fewer of the stage's requests than slo.attainment met every objective "
         "(failed requests count against it), or a percentile limit failed (slo.failed)"),
    Flag("slo_early", "the window closed before stages.duration_s: the SLO verdict was decided early "
         "(slo.early_stop; the bounds in slo.early_stop)"),
    Flag("slo_search", "a stage the SLO search added to refine the bracket (not part of the knee)"),
    Flag("interrupted", "Ctrl-C or SIGTERM stopped the run before the stage's last requests "
         "finished (unfinished_requests)"),
    Flag("error", "a fatal error stopped the run before the stage's last requests finished "
         "(unfinished_requests)"),
    Flag("drift", "a soak's figures moved beyond a drift threshold per hour over its time slices; what moved, "
         "how fast, since when: the stage's drift.verdict"),
    Flag("predicted", "not measured: predicted by the calibrated simulator (llm-loadgen whatif)"),
)

FLAG_KEYS = frozenset(f.key for f in FLAGS)
_MEANING = {f.key: f.meaning for f in FLAGS}


def meaning(key: str) -> str:
    """The one-line meaning of a declared flag; KeyError for an undeclared one."""
    return _MEANING[key]


def cut_flag(stop_reason: str | None) -> str:
    """The flag of a stage cut short by the run's stop: ``interrupted`` for Ctrl-C/SIGTERM, else
    ``error``."""
    return "interrupted" if stop_reason == "interrupted" else "error"


def flags_in(stages: Iterable[dict]) -> list[str]:
    """The declared flags present in ``stages`` (summary.json form), in the table's order."""
    seen = {f for s in stages for f in (s.get("flags") or [])}
    return [f.key for f in FLAGS if f.key in seen]


def legend_lines(keys: Iterable[str]) -> list[str]:
    """One line per flag: ``"flag <key>: <meaning>"``, in the table's order."""
    wanted = set(keys)
    return [f"flag {f.key}: {f.meaning}" for f in FLAGS if f.key in wanted]
