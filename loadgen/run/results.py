"""The run's results: typed facts per stage and about the guard, stage rows, ``summary.json``.

Pure: no Locust, no clock, no I/O (the caller passes times, statistics and health, and writes the
files with ``loadgen.report.files.write_results``). A stage row is ``StageStats.row(window_s)``
(the metric fields) plus what the run knows about the stage: index, concurrency, users, window,
server watch, client health, lost/unfinished requests and flags (docs/development/ARCHITECTURE.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from loadgen.analysis.breakdown import breakdown, client_figures, disagreement
from loadgen.config.headers import url_shown
from loadgen.run.cache_report import missing_cache_detail
from loadgen.run.kv_guard import GuardDecision, max_fitting_concurrency_of
from loadgen.run_folder.summary_file import SCHEMA
from loadgen.slo.early import EarlyVerdict
from loadgen.slo.limits import failed_text, stage_limits
from loadgen.slo.objectives import Objectives, stage_slo
from loadgen.slo.search import slo_summary
from loadgen.stats.cost import CostConfig, stage_cost
from loadgen.stats.metrics import SLO_ATTAINMENT
from loadgen.stats.stage_load import CONCURRENCY, RATE, load_label, stage_label
from loadgen.stats.stage_stats import HISTOGRAMS, StageStats
from loadgen.workload.mix import scenario_mix

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
    gpu: dict | None = None  # the GPUs over the window (GpuWatch.end_stage), with --gpu-metrics
    replica_servers: dict | None = None  # {replica: its /metrics over the window} (loadgen.server.replica_watch)
    lost_requests: int = 0  # a lost worker's in-flight requests of this stage
    flags: list[str] = field(default_factory=list)
    search: bool = False  # an SLO search stage (loadgen.run.plan), not one of the sweep's
    rate_per_s: float | None = None  # open loop: the offered rate asked for (after a guard clamp)
    parts: int = 1  # open loop: processes sharing the rate
    parts_lost_t: list[float] = field(default_factory=list)  # when each of them was lost
    early: EarlyVerdict | None = None  # the window closed early on this SLO verdict (slo.early_stop)

    def lose_part(self, t: float) -> None:
        """Open loop: a process sharing this stage's rate was lost at ``t`` (its share is not sent)."""
        self.parts_lost_t.append(t)
        if "worker_lost" not in self.flags:
            self.flags.append("worker_lost")

    def offered_rate_per_s(self) -> float | None:
        """The rate the fleet really offered during the window: each lost process's share
        (rate / parts) missing from its loss to the window's close,

            offered = rate x (1 - sum over lost parts of overlap(loss..close, window) / window_s / parts)
        """
        if self.rate_per_s is None or not self.parts_lost_t or not self.window_s or self.open_t is None:
            return self.rate_per_s
        close = self.open_t + self.window_s
        missed = sum(close - min(max(t, self.open_t), close) for t in self.parts_lost_t)
        return self.rate_per_s * (1 - missed / self.window_s / self.parts)

    @property
    def label(self) -> str:
        """The stage's load as every view names it: ``C=8``, or ``8 req/s`` (``loadgen.stats.stage_load``)."""
        rate = self.rate_per_s is not None
        return load_label(self.rate_per_s if rate else self.concurrency, rate)

    def load_fields(self) -> dict:
        """The stage's load as its summary.json row names it: ``{"concurrency": C}``, or for a rate
        stage ``{"concurrency": None, "offered_rate_per_s": r}`` (``open_loop_fields``)."""
        if self.rate_per_s is None:
            return {"concurrency": self.concurrency}
        return {"concurrency": None, "offered_rate_per_s": self.offered_rate_per_s()}

    @property
    def closed(self) -> bool:
        return self.window_s is not None

    def add_lost(self, requests: int) -> None:
        self.lost_requests += requests
        if "worker_lost" not in self.flags:
            self.flags.append("worker_lost")


@dataclass
class GuardLog:
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


def stage_row(info: StageInfo, stats: StageStats | None, guard: GuardLog, client: dict,
              client_bound: bool, unfinished: int | None = None, cut_by: str = "drain_timeout",
              objectives: Objectives | None = None, cost: CostConfig | None = None,
              models: dict[str, StageStats] | None = None, mix_names: tuple[str, ...] = ()) -> dict:
    """The stage's summary.json row. ``client``: the worst process's health over the stage;
    ``unfinished``: requests still running (or killed) when the row was forced, flagged ``cut_by``;
    with SLO ``objectives`` set, ``slo`` (``loadgen.slo.objectives.stage_slo``) and the flag ``slo_fail`` when
    the stage missed the attainment target or a percentile limit (``loadgen.slo.limits``); a
    window closed early (``slo.early_stop``) adds ``slo.early_stop`` and the flag ``slo_early``. Search
    stages have ``search: true`` and ``slo_search``. ``cost``: the scenario's, for the cost figures
    (``loadgen.stats.cost.stage_cost``). With a mix of models (``mix_names``), ``models``
    {name: figures} in the mix's order (``StageStats.model_row`` of ``models[name]``, zeros for a
    model no request of the stage drew)."""
    stats = stats or StageStats()
    row = {"index": info.index, "concurrency": info.concurrency, **stats.row(info.window_s)}
    if info.rate_per_s is not None:
        row.update(open_loop_fields(info, stats))
    flags = list(info.flags)
    if guard.clamped_to == info.concurrency:
        flags.append("guard_clamped")
    if info.concurrency in guard.warned:
        flags.append("guard_warn")
    if info.server:
        row["server"] = info.server
        if info.server.get("over_capacity"):
            flags.append("server_over_capacity")
        if info.server.get("server_restarted"):
            flags.append("server_restarted")
    if info.gpu:
        row["gpu"] = info.gpu
    row["client"] = client
    if client_bound:
        flags.append("client_bound")
    if unfinished is not None:
        row["unfinished_requests"] = unfinished
        flags.append(cut_by)
    if info.lost_requests:
        row["lost_requests"] = info.lost_requests
    if info.users is not None and info.rate_per_s is None and info.users < info.concurrency:
        flags.append("users_short")
    row["search"] = info.search
    if info.search:
        flags.append("slo_search")
    if objectives is not None and objectives.enabled:
        row["slo"] = stage_slo(stats.slo, stats.requests_ok + stats.error_count, objectives,
                               row["output_tokens_per_s"], stats.output_tokens + stats.failed_output_tokens)
        if objectives.limits:
            row["slo"] = stage_limits(row["slo"], stats, objectives.limits)
        if not row["slo"]["pass"]:
            flags.append("slo_fail")
        if info.early is not None:
            row["slo"]["early_stop"] = info.early.to_row(row["slo"]["pass"])
            flags.append("slo_early")
    if mix_names:
        row["models"] = {name: ((models or {}).get(name) or StageStats()).model_row(info.window_s)
                         for name in mix_names}
    row["users"] = info.users
    row["window_s"] = info.window_s
    if cost is not None:
        row.update(stage_cost(row, cost))
    row["flags"] = flags
    if (clocks := breakdown(client_figures(stats), info.server)) is not None:  # loadgen.analysis.breakdown
        row["breakdown"] = clocks
        if (gap := disagreement(row)) is not None:
            clocks["disagreement"] = gap
            if gap["populations"] == "agree":  # else the windows hold different requests: no verdict
                flags.append("clocks_disagree")
    return row


def open_loop_fields(info: StageInfo, stats: StageStats) -> dict:
    """An open-loop stage's figures (the x axis is the offered rate; ``concurrency`` is None):

    - offered_rate_per_s: the rate asked for, lowered for a lost process (``StageInfo``);
      planned_rate_per_s when it was lowered
    - scheduled_rate_per_s: arrivals that came due in the window / window_s (sent + dropped)
    - achieved_rate_per_s (a STAGE_METRICS field): ok requests finished in the window / window_s
    - concurrency_mean: time-weighted requests in flight = inflight_us / 1e6 / window_s
    - concurrency_max: the most in flight at once (in one process: the busiest's peak when
      distributed, a lower bound of the fleet's)
    - dropped_by_client: arrivals not sent because --max-inflight were in flight
    """
    w = info.window_s
    out = info.load_fields()
    if out["offered_rate_per_s"] != info.rate_per_s:
        out["planned_rate_per_s"] = info.rate_per_s
    out["scheduled_rate_per_s"] = stats.scheduled_requests / w if w else None
    out["concurrency_mean"] = stats.inflight_us / 1e6 / w if w else None
    out["concurrency_max"] = stats.inflight_peak
    out["dropped_by_client"] = stats.dropped_by_client
    return out


def stage_warnings(row: dict, input_tokens: int | str, output_tokens: int | str,
                   prefix_sharing: str | None = None) -> list[str]:
    """The lines to print under a stage row: token mismatches, missing usage, textless requests,
    no cache report on a workload that shares prefixes, client-bound.
    ``input_tokens``/``output_tokens``: the expected lengths, or words for them (a mix);
    ``prefix_sharing``: loadgen.run.cache_report.prefix_sharing of the workload."""
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
    if row.get("textless_requests"):
        out.append(f"llm-loadgen: warning: stage {k}: {row['textless_requests']} of {row['requests']} requests had "
                   "tokens (server usage) but no text, so their TTFT is their E2E (the stream's finishing "
                   "chunk): the server held the text back (an unfinished UTF-8 character) or the tokens "
                   "render as nothing")
    if (line := missing_cache_detail(row, prefix_sharing)) is not None:
        out.append(line)
    if "server_over_capacity" in row["flags"]:
        evidence = "; ".join((row.get("server") or {}).get("over_capacity_evidence") or row.get("replica_over_capacity")
                             or [])
        out.append(f"llm-loadgen: stage {k} {stage_label(row)}: the server was over capacity ({evidence}): "
                   "its figures measure queueing and recomputation, not steady serving")
    if row.get("offered_rate_per_s") is not None:
        out.append(f"llm-loadgen: stage {k}: offered {load_label(row['offered_rate_per_s'], rate=True)}, achieved "
                   f"{load_label(row.get('achieved_rate_per_s'), rate=True)}; in flight mean {_n(row['concurrency_mean'])}"
                   f" max {row['concurrency_max']}; send lateness p99 {_n(row.get('lateness_p99_s'), 1000)} ms; "
                   f"dropped_by_client {row['dropped_by_client']}")
    if (row.get("slo") or {}).get("failed"):
        out.append(f"llm-loadgen: stage {k} {stage_label(row)} failed the SLO: {failed_text(row['slo'])}")
    early = (row.get("slo") or {}).get("early_stop")
    if early and not early["agrees"]:
        out.append(f"llm-loadgen: stage {k} {stage_label(row)}: the early SLO verdict ({early['verdict']}) "
                   "disagrees with the verdict on all its requests; the row keeps the latter "
                   "(docs/slo.md 'Early stop')")
    if "client_bound" in row["flags"]:
        client = row["client"]
        cpu, lag = client.get("cpu_percent"), client.get("loop_lag_p99_s")
        out.append(f"llm-loadgen: stage {k} was CLIENT-BOUND (CPU {'-' if cpu is None else f'{cpu:.0f}'}%, "
                   f"loop lag p99 {'-' if lag is None else f'{lag * 1000:.1f}'} ms): its TTFT/ITL include "
                   "client delays; add workers (--processes N or more --worker processes)")
    return out


def _n(value: float | None, scale: float = 1.0) -> str:
    return "-" if value is None else f"{value * scale:.3g}"


def totals_of(t: StageStats) -> dict:
    """Every request of the run (warmup and ramps included), each histogram's count, and with SLO
    objectives the run's SLO counts (``slo``)."""
    return {
        "requests": t.requests_ok,
        "errors": dict(t.errors),
        "input_tokens": t.input_tokens,
        "output_tokens": t.output_tokens,
        "failed_output_tokens": t.failed_output_tokens,
        "textless_requests": t.textless_requests,
        "received_output_tokens": t.window_output_tokens,
        "cancelled_requests": t.cancelled_requests,  # cut by the client itself: neither ok nor failed
        "cancelled_output_tokens": t.cancelled_output_tokens,
        "histogram_counts": {name: getattr(t, name).count for name in HISTOGRAMS},
        "reasoning_tokens": t.reasoning_tokens,
        # usage.prompt_tokens_details (loadgen.stats.answer): only when the server reported it
        **({"prompt_cache": {"cached_prompt_tokens": t.cached_prompt_tokens,
                             "reported_prompt_tokens": t.cache_reported_prompt_tokens,
                             "reported_requests": t.cache_reported_requests,
                             # prompt tokens of requests without the detail (SGLang omits a 0): 0 cached
                             "unreported_prompt_tokens": t.cache_unreported_prompt_tokens}}
           if t.cache_reported_requests else {}),
        "failures": t.failures.to_summary(),
        **({"slo": {"judged_requests": t.slo.judged, "met_requests": t.slo.met,
                    "met_output_tokens": t.slo.met_output_tokens, "met_by": dict(t.slo.met_by)}}
           if t.slo.judged else {}),
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
    name: str | None = None  # the effective scenario (loadgen.run_folder.folders.run_name)


def slo_outcomes(rows: list[dict], load_key: str = "concurrency") -> list[tuple[float, bool]]:
    """(load, passed) of every stage row judged against the SLO that measured requests; the load is
    ``load_key``: the concurrency, or an open-loop run's ``offered_rate_per_s``."""
    return [(r[load_key], r["slo"]["pass"]) for r in rows
            if r.get("slo") and r["slo"]["attainment"] is not None and r.get(load_key) is not None]


def latest_attainment(stages: dict[int, StageStats], k: int | None) -> float | None:
    """SLO attainment (the metric table's share) of the latest stage up to k with judged requests:
    stage k's so far, or the one before during k's ramp and warmup (the exporter's gauge)."""
    judged = [i for i, st in stages.items() if st.slo.judged and (k is None or i <= k)]
    return SLO_ATTAINMENT.value(stages[max(judged)], None) if judged else None


def summary_slo(rows: list[dict], objectives: Objectives, load_key: str = "concurrency") -> dict | None:
    """summary.json's top-level ``slo`` (``loadgen.slo.search.slo_summary``); None without objectives. In an
    open-loop run the bracket is in offered requests/s (``load: rate_per_s``)."""
    if not objectives.enabled:
        return None
    load = "rate_per_s" if load_key == RATE else CONCURRENCY
    return slo_summary(slo_outcomes(rows, load_key), objectives,
                      [r[load_key] for r in rows if r.get("search")], load)


def kv_ceiling(capacity, scenario, dataset=None) -> int | None:
    """The largest concurrency whose KV projection fits, projected as the run's guard projects its
    stages (``kv_guard.max_fitting_concurrency_of`` over ``loadgen.workload.mix.scenario_mix``)."""
    if capacity is None or not capacity.tokens:
        return None
    return max_fitting_concurrency_of(capacity.tokens, scenario_mix(scenario, dataset), scenario.guard.margin)


def build_summary(run: RunFacts, scenario, capacity, guard: GuardLog, rows: list[dict],
                  knee: float | None, totals: StageStats, compat=None, probes: tuple = ((), None),
                  dataset=None) -> dict:
    """summary.json (schema in docs/development/ARCHITECTURE.md); the knee stage's row gets the ``knee`` flag.
    ``knee``: a concurrency, or in open-loop mode an offered rate (``knee.rate_per_s``).
    ``compat``: loadgen.wire.compat.Compat of the start check; ``probes``: (outcome of each probe request,
    their StageStats): ``preflight``, a part of ``totals`` that no worker sent; ``dataset``: the
    run's dataset lines (the KV ceiling's mix of lengths), None for synthetic lengths."""
    sc, cap = scenario, capacity
    load_key = RATE if sc.open_loop else CONCURRENCY
    return {
        "schema": SCHEMA,
        "tool": dict(TOOL),
        "run": {
            "name": run.name,
            "started_at": iso(run.started_wall),
            "ended_at": iso(run.ended_wall),
            "host": url_shown(run.host),
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
            "slots": cap.slots if cap else None,
            "compat": compat.to_dict() if compat else None,
        },
        "preflight": {"probes": list(probes[0]), **totals_of(probes[1] or StageStats())},
        "guard": {
            "capacity_tokens": cap.tokens if cap else None,
            "capacity_source": cap.source if cap else None,
            "margin": sc.guard.margin,
            "action": sc.guard.action,
            "stopped_before": guard.stopped_before,
            "clamped_to": guard.clamped_to,
            "breaches": guard.breaches,
            "max_concurrency": kv_ceiling(cap, sc, dataset),
        },
        "knee": {"concurrency": None if sc.open_loop else knee, "threshold": sc.knee.threshold,
                 **({"rate_per_s": knee} if sc.open_loop else {})},
        "slo": summary_slo(rows, sc.slo, load_key),
        "totals": totals_of(totals),
        "stages": [dict(r, flags=r["flags"] + (["knee"] if knee is not None and r.get(load_key) == knee else []))
                   for r in rows],
    }
