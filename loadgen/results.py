"""The run's results: typed facts per stage and about the guard, stage rows, ``summary.json``.

Pure: no Locust, no clock, no I/O (the caller passes times, statistics and health, and writes the
files with ``loadgen.report.files.write_results``). A stage row is ``StageStats.row(window_s)``
(the metric fields) plus what the run knows about the stage: index, concurrency, users, window,
server watch, client health, lost/unfinished requests and flags (docs/ARCHITECTURE.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from loadgen.guard import GuardDecision
from loadgen.stats import HISTOGRAMS, StageStats

SCHEMA = 1
TOOL = {"name": "llm-loadgen", "version": "0.1.0"}


def iso(ts: float | None) -> str | None:
    """Wall-clock seconds -> ISO 8601 UTC (None stays None)."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds") if ts else None


@dataclass
class StageInfo:
    """What the run learned about one stage, as its phases pass (times on the shape's clock, s)."""

    index: int
    concurrency: int  # the users asked for (after a guard clamp)
    open_t: float | None = None  # the window opened
    open_wall: float | None = None
    window_s: float | None = None  # set when the window closed: close t - open t
    users: int | None = None  # users running when the window closed
    server: dict | None = None  # the server watch over the window (ServerWatch.end_stage)
    lost_requests: int = 0  # a lost worker's in-flight requests of this stage
    flags: list[str] = field(default_factory=list)

    @property
    def closed(self) -> bool:
        return self.window_s is not None

    def add_lost(self, requests: int) -> None:
        self.lost_requests += requests
        if "worker_lost" not in self.flags:
            self.flags.append("worker_lost")


@dataclass
class GuardRecord:
    """The guard's decisions over the run (summary.json ``guard``, exporter ``guard_breaches``)."""

    stopped_before: int | None = None  # the concurrency it refused (or clamped)
    clamped_to: int | None = None
    breaches: int = 0
    warned: list[int] = field(default_factory=list)  # concurrencies run despite a breach (warn)
    last: GuardDecision | None = None

    def record(self, d: GuardDecision) -> None:
        self.last = d
        if d.breach:
            self.breaches += 1
        if not d.allowed:
            self.stopped_before = d.concurrency
        elif d.run_concurrency and d.run_concurrency != d.concurrency:
            self.clamped_to = d.run_concurrency
            self.stopped_before = d.concurrency
        elif d.breach:
            self.warned.append(d.concurrency)


def stage_row(info: StageInfo, stats: StageStats | None, guard: GuardRecord, client: dict,
              client_bound: bool, unfinished: int | None = None, cut_by: str = "drain_timeout") -> dict:
    """The stage's summary.json row. ``client``: the worst process's health over the stage;
    ``unfinished``: requests still running (or killed) when the row was forced, flagged ``cut_by``."""
    row = {"index": info.index, "concurrency": info.concurrency, **(stats or StageStats()).row(info.window_s)}
    flags = list(info.flags)
    if guard.clamped_to == info.concurrency:
        flags.append("guard_clamped")
    if info.concurrency in guard.warned:
        flags.append("guard_warn")
    if info.server:
        row["server"] = info.server
        if info.server.get("over_capacity"):
            flags.append("server_over_capacity")
    row["client"] = client
    if client_bound:
        flags.append("client_bound")
    if unfinished is not None:
        row["unfinished_requests"] = unfinished
        flags.append(cut_by)
    if info.lost_requests:
        row["lost_requests"] = info.lost_requests
    if info.users is not None and info.users < info.concurrency:
        flags.append("users_short")
    row["users"] = info.users
    row["window_s"] = info.window_s
    row["flags"] = flags
    return row


def stage_warnings(row: dict, input_tokens: int, output_tokens: int) -> list[str]:
    """The lines to print under a stage row: token mismatches, missing usage, client-bound."""
    k, out = row["index"], []
    mismatch = row.get("token_mismatch") or {}
    if mismatch.get("input") or mismatch.get("output"):
        out.append(f"llm-loadgen: warning: stage {k}: {mismatch.get('input', 0)} of {row['requests']} requests "
                   f"had a prompt other than {input_tokens} tokens and {mismatch.get('output', 0)} an "
                   f"output other than {output_tokens} (does the server honour min_tokens/ignore_eos? "
                   "chat: a template that varies?)")
    if mismatch.get("estimated"):
        out.append(f"llm-loadgen: warning: stage {k}: {mismatch['estimated']} requests came without usage; "
                   "their token counts are counted chunks (stream_options.include_usage ignored?)")
    if "server_over_capacity" in row["flags"]:
        evidence = "; ".join((row.get("server") or {}).get("over_capacity_evidence") or [])
        out.append(f"llm-loadgen: stage {k} C={row['concurrency']}: the server was over capacity ({evidence}): "
                   "its figures measure queueing and recomputation, not steady serving")
    if "client_bound" in row["flags"]:
        client = row["client"]
        cpu, lag = client.get("cpu_percent"), client.get("loop_lag_p99_s")
        out.append(f"llm-loadgen: stage {k} was CLIENT-BOUND (CPU {'-' if cpu is None else f'{cpu:.0f}'}%, "
                   f"loop lag p99 {'-' if lag is None else f'{lag * 1000:.1f}'} ms): its TTFT/ITL include "
                   "client delays; add workers (--processes N or more --worker processes)")
    return out


def totals_of(t: StageStats) -> dict:
    """Every request of the run (warmup and ramps included), and each histogram's count."""
    return {
        "requests": t.requests_ok,
        "errors": dict(t.errors),
        "input_tokens": t.input_tokens,
        "output_tokens": t.output_tokens,
        "failed_output_tokens": t.failed_output_tokens,
        "received_output_tokens": t.window_output_tokens,
        "histogram_counts": {name: getattr(t, name).count for name in HISTOGRAMS},
    }


@dataclass(frozen=True)
class RunFacts:
    """summary.json ``run`` (times: wall clock, s)."""

    started_wall: float
    ended_wall: float | None  # None while the run goes on
    host: str | None
    model: str | None
    endpoint: str
    exit_code: int | None
    stop_reason: str | None
    workers: int
    worker_losses: list
    name: str | None = None  # the effective scenario (loadgen.report.runs.run_name)


def build_summary(run: RunFacts, scenario, capacity, guard: GuardRecord, rows: list[dict],
                  knee: int | None, totals: StageStats) -> dict:
    """summary.json (schema in docs/ARCHITECTURE.md); the knee stage's row gets the ``knee`` flag."""
    sc, cap = scenario, capacity
    return {
        "schema": SCHEMA,
        "tool": dict(TOOL),
        "run": {
            "name": run.name,
            "started_at": iso(run.started_wall),
            "ended_at": iso(run.ended_wall),
            "host": run.host,
            "model": run.model,
            "endpoint": run.endpoint,
            "exit_code": run.exit_code,
            "stop_reason": run.stop_reason,
            "workers": run.workers,
            "worker_losses": run.worker_losses,
        },
        "scenario": sc.to_dict(),
        "server": {
            "flavor": cap.flavor if cap else None,
            "max_model_len": cap.max_model_len if cap else None,
            "capacity_detail": cap.detail if cap else None,
        },
        "guard": {
            "capacity_tokens": cap.tokens if cap else None,
            "capacity_source": cap.source if cap else None,
            "margin": sc.guard.margin,
            "action": sc.guard.action,
            "stopped_before": guard.stopped_before,
            "clamped_to": guard.clamped_to,
            "breaches": guard.breaches,
        },
        "knee": {"concurrency": knee, "threshold": sc.knee.threshold},
        "totals": totals_of(totals),
        "stages": [dict(r, flags=r["flags"] + (["knee"] if r["concurrency"] == knee else [])) for r in rows],
    }
