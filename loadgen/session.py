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
from loadgen.client import StreamClient
from loadgen.errors import ConfigError, ServerUnusableError
from loadgen.exporter import exporter_from_config
from loadgen.guard import decide
from loadgen.health import is_client_bound
from loadgen.report.files import write_results
from loadgen.report.knee import find_knee
from loadgen.report.table import format_stage_header, format_stage_row, format_stage_table
from loadgen.runtime import discover_model, not_openai_message
from loadgen.server_probe import ServerWatch, resolve_capacity

log = logging.getLogger("llm_loadgen")


def _iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds") if ts else None


def say(line: str) -> None:
    """User-facing progress: stderr, one line, flushed (Locust's stats go to stdout)."""
    print(line, file=sys.stderr, flush=True)


class Session:
    def __init__(self, rt):
        self.rt = rt
        self.started_wall = time.time()
        self.capacity = None  # guard.Capacity
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
        """Before the first stage: can we talk to the server, which model, what KV capacity.

        Returns False when the run must not start (the reason is printed and the exit code set).
        """
        self.started = True
        rt, sc = self.rt, self.rt.scenario
        host = rt.environment.host
        if not host:
            self.fatal(errors.EXIT_CONFIG, "no target: pass --host http://HOST:PORT of the server")
            return False
        try:
            client = StreamClient(host, api_key=rt.api_key, connect_timeout_s=sc.request.connect_timeout_s,
                                  read_timeout_s=sc.request.read_timeout_s)
        except ServerUnusableError as exc:
            self.fatal(errors.EXIT_CONFIG, str(exc))
            return False
        try:
            discovered = discover_model(client)
            if rt._model is None:
                rt._model = discovered
        except ServerUnusableError as exc:
            if exc.kind == errors.CONNECT_FAILED:
                self.fatal(errors.EXIT_SERVER_UNUSABLE, f"cannot connect to {host} ({exc.detail}); "
                           "is the server running? check --host")
                return False
            if rt._model is None:
                if exc.kind == errors.NOT_OPENAI:
                    self.fatal(errors.EXIT_SERVER_UNUSABLE, not_openai_message(host, exc.detail))
                elif exc.detail.startswith(("HTTP 401", "HTTP 403")):
                    where = f"the environment variable {sc.api_key_env}" if sc.api_key_env else "api_key_env"
                    self.fatal(errors.EXIT_SERVER_UNUSABLE, f"{host} refused the request (GET /v1/models: "
                               f"{exc.detail}); check the API key in {where}")
                else:
                    self.fatal(errors.EXIT_SERVER_UNUSABLE, str(exc))
                return False
            say(self.rt.redact(f"llm-loadgen: warning: model discovery failed ({exc.detail or exc}); "
                               f"going on with model {rt._model!r}"))
        finally:
            client.close()
        headers = {"Authorization": f"Bearer {rt.api_key}"} if rt.api_key else {}
        self._start_guard(host, headers)
        if self.exit_code is None:
            try:
                self.exporter = exporter_from_config(sc.exporter.host, sc.exporter.port, rt)
            except ConfigError as exc:
                self.fatal(errors.EXIT_CONFIG, f"config error: {exc}")
            if self.exporter is not None:
                say(f"llm-loadgen: Prometheus exporter at {self.exporter.url}")
        return self.exit_code is None

    def _start_guard(self, host: str, headers: dict) -> None:
        sc = self.rt.scenario
        self.capacity = resolve_capacity(sc.guard.kv_capacity_tokens, host, headers)
        cap = self.capacity
        need = sc.input_tokens + sc.output_tokens
        if cap.max_model_len and need > cap.max_model_len:
            # every request would be refused with a 400: say so once instead of sweeping failures
            self.fatal(errors.EXIT_CONFIG, f"config error: input_tokens + output_tokens = {need:,} exceeds "
                       f"the server's max_model_len {cap.max_model_len:,} (GET /v1/models); lower "
                       "--input-tokens or --output-tokens")
            return
        if cap.tokens is None:
            say(f"llm-loadgen: KV capacity unknown ({cap.detail}); running UNGUARDED "
                "(set guard.kv_capacity_tokens or --kv-capacity-tokens to guard)")
            if sc.guard.require:
                self.fatal(errors.EXIT_GUARD_ABORT, "--require-guard is set and the server reports no "
                           "KV capacity; set --kv-capacity-tokens to the server's KV tokens")
                return
        else:
            say(f"llm-loadgen: KV capacity {cap.tokens:,} tokens (source: {cap.source})")
        if sc.guard.watch and cap.flavor:
            self.watch = ServerWatch(host, headers, cap.flavor, sc.guard.watch_interval_s)
            self.watch.start()

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
        self.rt.end_window(k)
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
        client = rt.stage_health(k)
        row["client"] = client
        if client["cpu_percent"] is not None and is_client_bound(
            client, sc.client_check.cpu_percent_max, sc.client_check.loop_lag_p99_s_max
        ):
            flags.append("client_bound")
        if forced:
            # still running, or already killed by the stop (Locust stops users before `quitting`)
            row["unfinished_requests"] = rt.inflight(k) + rt.cancelled.get(k, 0)
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
        """Master: a worker that stopped reporting is recorded as lost, with what it had running.

        Its samples reported so far stay counted (deltas are additive, never resent); its
        in-flight requests are lost and no longer hold back the stages they belong to.
        """
        rt = self.rt
        if not rt.is_master:
            return
        live = set(rt.live_workers())
        for cid in [c for c in rt.worker_inflight if c not in live]:
            lost = rt.worker_inflight.pop(cid)
            rt.worker_phase_seq.pop(cid, None)
            rt.worker_health_now.pop(cid, None)
            running = {k: int(n) for k, n in lost.items() if n}
            for k, n in running.items():
                if k is not None and k in self.stage_info:
                    info = self.stage_info[k]
                    info["lost_requests"] = info.get("lost_requests", 0) + n
                    if "worker_lost" not in info["flags"]:
                        info["flags"].append("worker_lost")
            concurrency = self.stage_info.get(rt.stage, {}).get("concurrency")
            self.worker_losses.append({
                "worker": cid, "at": _iso(time.time()), "stage": rt.stage, "concurrency": concurrency,
                "phase": rt.kind, "inflight_lost": sum(running.values()),
            })
            say(f"llm-loadgen: worker {cid} lost during stage {rt.stage} ({rt.kind}); "
                f"{sum(running.values())} requests it was running are lost; carrying on")

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
                "model": rt._model,
                "endpoint": sc.endpoint,
                "exit_code": self.exit_code if self.exit_code is not None else (0 if final else None),
                "stop_reason": self.stop_reason,
                "workers": len(rt.workers_seen) if rt.is_master else 1,
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
