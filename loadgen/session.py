"""The run as the owning process (local runner or master) sees it: from start checks to results.

``Session`` turns the sweep plan's events into what users get: a phase for every process, a guard
decision before each stage, a row per stage printed when its last request finishes, and
``summary.json`` / ``stages.csv`` / ``report.html`` rewritten after every stage and on every stop
path (normal end, guard abort, Ctrl-C / SIGTERM, fatal error), so nothing gathered is lost.
"""

from __future__ import annotations

import logging
import sys
import time
from datetime import UTC, datetime

import gevent

from loadgen import errors
from loadgen.errors import ConfigError
from loadgen.exporter import exporter_from_config
from loadgen.guard import decide
from loadgen.health import is_client_bound
from loadgen.phases import Phase
from loadgen.preflight import StartRefused, preflight
from loadgen.report.files import write_results
from loadgen.report.knee import find_knee
from loadgen.report.table import format_stage_header, format_stage_row, format_stage_table
from loadgen.server_probe import ServerWatch

log = logging.getLogger("llm_loadgen")


def _iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds") if ts else None


def say(line: str) -> None:
    """User-facing progress: stderr, one line, flushed (Locust's stats go to stdout)."""
    print(line, file=sys.stderr, flush=True)


class Session:
    """The run's state on the process that owns it; ``rt`` is that process's Runtime, ``fleet``
    the load-generating processes (``loadgen.distributed``)."""

    def __init__(self, rt, fleet):
        self.rt, self.fleet = rt, fleet
        rt.on_fatal = lambda message: self.fatal(errors.EXIT_SERVER_UNUSABLE, message)
        self.started_wall = time.time()
        self.server = None  # preflight.ServerInfo, once the start check passed
        self.capacity = None  # server_probe.Capacity
        self.watch: ServerWatch | None = None
        self.stage_info: dict[int, dict] = {}
        self.rows: list[dict] = []
        self.guard_state = {"stopped_before": None, "clamped_to": None, "breaches": 0, "warned": []}
        self.stop_reason: str | None = None
        self.exit_code: int | None = None
        self.close_seq: dict[int, int] = {}
        self.worker_losses: list[dict] = []
        self.finished_run = False
        self.started = False
        self.exporter = None
        self.last_decision = None

    # -- start -------------------------------------------------------------------------------------
    def start(self) -> bool:
        """Before the first stage: the start check (``loadgen.preflight``), the server watch and
        the exporter. Returns False when the run must not start (the reason is printed and the
        exit code set)."""
        self.started = True
        rt, sc = self.rt, self.rt.scenario
        host = rt.environment.host
        try:
            self.server = preflight(host, sc, rt.api_key, lambda line: say(rt.redact(line)))
        except StartRefused as exc:
            self.fatal(exc.exit_code, str(exc))
            return False
        rt.use_model(self.server.model)
        self.capacity = cap = self.server.capacity
        if sc.guard.watch and cap.flavor:
            self.watch = ServerWatch(host, rt.api_key, cap.flavor, sc.guard.watch_interval_s)
            self.watch.start()
        try:
            self.exporter = exporter_from_config(sc.exporter.host, sc.exporter.port, ExporterFeed(self))
        except ConfigError as exc:
            self.fatal(errors.EXIT_CONFIG, f"config error: {exc}")
        if self.exporter is not None:
            say(f"llm-loadgen: Prometheus exporter at {self.exporter.url}")
        return self.exit_code is None

    def decide(self, concurrency: int):
        sc = self.rt.scenario
        return decide(concurrency, self.capacity.tokens if self.capacity else None, sc.input_tokens,
                      sc.output_tokens, sc.guard.margin, sc.guard.action)

    # -- sweep events --------------------------------------------------------------------------------
    def on_event(self, ev, now: float) -> None:
        rt = self.rt
        if ev.kind == "phase":
            rt.set_phase(ev.stage, ev.data["kind"])
            if ev.data["kind"] == "ramp":
                self.stage_info[ev.stage] = {"concurrency": ev.data["concurrency"], "flags": []}
                say(f"llm-loadgen: stage {ev.stage} C={ev.data['concurrency']}: ramp")
        elif ev.kind == "guard":
            self._on_guard(ev)
        elif ev.kind == "window_open":
            info = self.stage_info[ev.stage]
            info["open_t"], info["open_wall"] = ev.data["t"], time.time()
            if self.watch:
                self.watch.begin_stage(ev.stage)
        elif ev.kind == "window_close":
            info = self.stage_info[ev.stage]
            info["window_s"] = ev.data["t"] - info["open_t"]
            info["users"] = ev.data["users"]
            self.close_seq[ev.stage] = rt.phase_seq + 1  # the next phase's seq
            if self.watch and "server" not in info:
                info["server"] = self.watch.end_stage(ev.stage)
        elif ev.kind == "final":
            self._finalize(ev.stage, forced=ev.data.get("forced", False))
        elif ev.kind == "done":
            self.stop_reason = ev.data["reason"]
            if self.stop_reason in ("guard_abort", "server_over_capacity"):
                self.exit_code = errors.EXIT_GUARD_ABORT
            self.finished_run = True

    def close_window(self, k: int, t: float, users: int) -> str | None:
        """The plan asks as a stage's window closes: read the server watch for it, and say whether
        the sweep must stop here (``guard.abort_on_over_capacity`` and the server was over capacity).
        The window itself is recorded by the ``window_close`` event that follows."""
        info = self.stage_info[k]
        # stop counting toward the window here and on every worker before the slow /metrics read
        self.rt.set_phase(k, Phase.CLOSING)
        self.fleet.broadcast_phase()
        if not self.watch:
            return None
        server = info["server"] = self.watch.end_stage(k)
        if server.get("over_capacity") and self.rt.scenario.guard.abort_on_over_capacity:
            say(f"llm-loadgen: guard: the server was over capacity during stage {k} "
                f"(C={info['concurrency']}: preemptions {server.get('preemptions')}, queued polls "
                f"{server.get('queued_polls_max')}); stopping the sweep (guard.abort_on_over_capacity)")
            return "server_over_capacity"
        return None

    def _on_guard(self, ev) -> None:
        d = ev.data["decision"]
        if d.breach:
            self.guard_state["breaches"] += 1
            say(f"llm-loadgen: guard: {d.message}")
        if not d.allowed:
            self.guard_state["stopped_before"] = d.concurrency
        elif d.run_concurrency and d.run_concurrency != d.concurrency:
            self.guard_state["clamped_to"] = d.run_concurrency
            self.guard_state["stopped_before"] = d.concurrency
        elif d.breach:
            self.guard_state["warned"].append(d.concurrency)
        self.last_decision = d

    def _finalize(self, k: int, forced: bool, flag: str = "drain_timeout") -> None:
        rt, sc = self.rt, self.rt.scenario
        info = self.stage_info[k]
        stats = rt.collector.stages.get(k)
        from loadgen.stats import StageStats

        row = (stats or StageStats()).row(info["window_s"])
        row = {"index": k, "concurrency": info["concurrency"], **row}
        flags = list(info["flags"])
        if self.guard_state["clamped_to"] == info["concurrency"]:
            flags.append("guard_clamped")
        if info["concurrency"] in self.guard_state["warned"]:
            flags.append("guard_warn")
        server = info.get("server")
        if server:
            row["server"] = server
            if server.get("over_capacity"):
                flags.append("server_over_capacity")
        client = self.fleet.stage_health(k)
        row["client"] = client
        if client["cpu_percent"] is not None and is_client_bound(
            client, sc.client_check.cpu_percent_max, sc.client_check.loop_lag_p99_s_max
        ):
            flags.append("client_bound")
        if forced:
            # still running, or already killed by the stop (Locust stops users before `quitting`)
            row["unfinished_requests"] = self.fleet.inflight(k) + rt.cancelled.get(k, 0)
            flags.append(flag)
        if info.get("lost_requests"):
            row["lost_requests"] = info["lost_requests"]
        if info.get("users") is not None and info["users"] < info["concurrency"]:
            flags.append("users_short")
        row["users"] = info.get("users")
        row["window_s"] = info["window_s"]
        row["flags"] = flags
        self.rows.append(row)
        if len(self.rows) == 1:
            say(format_stage_header())
        say(format_stage_row(row))
        mismatch = row.get("token_mismatch") or {}
        if mismatch.get("input") or mismatch.get("output"):
            say(f"llm-loadgen: warning: stage {k}: {mismatch.get('input', 0)} of {row['requests']} requests "
                f"had a prompt other than {sc.input_tokens} tokens and {mismatch.get('output', 0)} an "
                f"output other than {sc.output_tokens} (does the server honour min_tokens/ignore_eos? "
                "chat: a template that varies?)")
        if mismatch.get("estimated"):
            say(f"llm-loadgen: warning: stage {k}: {mismatch['estimated']} requests came without usage; "
                "their token counts are counted chunks (stream_options.include_usage ignored?)")
        if "client_bound" in flags:
            say(f"llm-loadgen: stage {k} was CLIENT-BOUND (CPU {client['cpu_percent']}%, loop lag p99 "
                f"{client['loop_lag_p99_s']} s): its TTFT/ITL include client delays; add workers "
                "(--processes N or more --worker processes)")
        self.write()

    # -- workers ------------------------------------------------------------------------------------
    def check_workers(self) -> None:
        """Master: a worker that stopped reporting is recorded as lost, with what it had running
        (its samples reported so far stay counted; see ``Fleet.drop_lost``)."""
        rt = self.rt
        for lost in self.fleet.drop_lost():
            for k, n in lost.running.items():
                if k is not None and k in self.stage_info:
                    info = self.stage_info[k]
                    info["lost_requests"] = info.get("lost_requests", 0) + n
                    if "worker_lost" not in info["flags"]:
                        info["flags"].append("worker_lost")
            concurrency = self.stage_info.get(rt.stage, {}).get("concurrency")
            self.worker_losses.append({
                "worker": lost.client_id, "at": _iso(time.time()), "stage": rt.stage, "concurrency": concurrency,
                "phase": rt.kind, "inflight_lost": lost.requests,
            })
            say(f"llm-loadgen: worker {lost.client_id} lost during stage {rt.stage} ({rt.kind}); "
                f"{lost.requests} requests it was running are lost; carrying on")

    # -- stop paths --------------------------------------------------------------------------------
    def fatal(self, code: int, message: str) -> None:
        """Stop the run now with a clear one-line message; results so far are written on quit."""
        say(self.rt.redact(f"llm-loadgen: {message}"))
        self.stop_reason = self.stop_reason or "error"
        self.exit_code = code
        runner = self.rt.environment.runner
        self.rt.environment.process_exit_code = code
        if runner is not None:
            gevent.spawn_later(0, runner.quit)

    def on_quit(self) -> None:
        """After Locust's runner quit: the workers' final reports are in; write everything again."""
        self.write(final=True)

    def on_quitting(self) -> None:
        env = self.rt.environment
        if self.stop_reason is None:
            self.stop_reason = "interrupted"
            self.exit_code = errors.EXIT_INTERRUPTED
        if self.exit_code is not None:
            env.process_exit_code = self.exit_code
        elif env.process_exit_code is None:
            # Locust's own rule, recorded so summary.json says how the process ended
            runner = env.runner
            failed = runner is not None and (runner.errors or runner.exceptions)
            self.exit_code = env.parsed_options.exit_code_on_error if failed else errors.EXIT_OK
        if self.watch:
            self.watch.stop()
        if self.exporter is not None:
            self.exporter.stop()
        # A stage whose window closed but whose last requests were still running when the run was
        # stopped (Ctrl-C, SIGTERM, fatal error) is written too, flagged with what cut it short.
        written = {r["index"] for r in self.rows}
        for k, info in sorted(self.stage_info.items()):
            if "window_s" in info and k not in written:
                self._finalize(k, forced=True, flag=self.stop_reason)
        self.write(final=False)
        if self.rows:
            summary = self.summary(final=True)
            say(format_stage_table(self.rows, self.knee(), guard=summary["guard"],
                                   threshold=self.rt.scenario.knee.threshold))
        say(f"llm-loadgen: {self.stop_reason}; results in {self.rt.scenario.results_dir}/")

    # -- results -------------------------------------------------------------------------------------
    def knee(self) -> int | None:
        return find_knee(self.rows, self.rt.scenario.knee.threshold)

    def summary(self, final: bool = False) -> dict:
        rt, sc = self.rt, self.rt.scenario
        cap = self.capacity
        knee = self.knee()
        rows = [dict(r, flags=r["flags"] + (["knee"] if r["concurrency"] == knee else [])) for r in self.rows]
        env = rt.environment
        return {
            "schema": 1,
            "tool": {"name": "llm-loadgen", "version": "0.1.0"},
            "run": {
                "started_at": _iso(self.started_wall),
                "ended_at": _iso(time.time()) if final else None,
                "host": env.host,
                "model": rt.model_name,
                "endpoint": sc.endpoint,
                "exit_code": self.exit_code if self.exit_code is not None else (0 if final else None),
                "stop_reason": self.stop_reason,
                "workers": self.fleet.workers,
                "worker_losses": self.worker_losses,
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
                "stopped_before": self.guard_state["stopped_before"],
                "clamped_to": self.guard_state["clamped_to"],
                "breaches": self.guard_state["breaches"],
            },
            "knee": {"concurrency": knee, "threshold": sc.knee.threshold},
            "totals": self.totals(),
            "stages": rows,
        }

    def totals(self) -> dict:
        """Every request of the run (warmup and ramps included), and each histogram's count."""
        t = self.rt.collector.totals
        from loadgen.stats import HISTOGRAMS

        return {
            "requests": t.requests_ok,
            "errors": dict(t.errors),
            "input_tokens": t.input_tokens,
            "output_tokens": t.output_tokens,
            "failed_output_tokens": t.failed_output_tokens,
            "received_output_tokens": t.window_output_tokens,
            "histogram_counts": {name: getattr(t, name).count for name in HISTOGRAMS},
        }

    def write(self, final: bool = False) -> None:
        try:
            # Plots cost ~0.6 CPU-s: only once the run is over, never while requests are timed.
            write_results(self.rt.scenario.results_dir, self.summary(final), plots=final)
        except Exception as exc:  # never lose the run to a report problem
            log.exception("writing results failed: %s", exc)


class ExporterFeed:
    """The exporter's source (``exporter.ExporterSource``): the run as it stands, at each scrape."""

    def __init__(self, session: Session):
        self.session = session

    def exporter_snapshot(self):
        from loadgen.exporter import ExporterSnapshot

        session, rt = self.session, self.session.rt
        cpu, lag = session.fleet.health_now()
        decision, capacity = session.last_decision, session.capacity
        info = session.stage_info.get(rt.stage, {}) if rt.stage is not None else {}
        return ExporterSnapshot(
            totals=rt.collector.totals,
            inflight=session.fleet.inflight_total(),
            users=rt.environment.runner.user_count if rt.environment.runner else 0,
            stage_index=rt.stage,
            target_concurrency=info.get("concurrency"),
            phase=rt.kind,
            kv_projected_tokens=decision.projected_tokens if decision else None,
            kv_capacity_tokens=capacity.tokens if capacity else None,
            guard_breaches=session.guard_state["breaches"],
            client_cpu_percent=cpu,
            client_loop_lag_s=lag,
            model=rt.model_name or "",
            endpoint=rt.scenario.endpoint,
            scenario=rt.scenario.name,
        )
