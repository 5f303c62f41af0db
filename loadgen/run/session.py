"""The run as the owning process (local runner or master) sees it: from start checks to results.

``Session`` owns the run's state: the start check's answer (``loadgen.server.start_check``), the server
watch, each stage's ``results.StageInfo``, the guard's record, the rows, the stop reason and exit
code. It turns the sweep plan's typed events into what users get: a phase for every process, a
guard decision before each stage, one read of the server watch (and of the GPU watch, with
``--gpu-metrics``) as each window opens and closes, a row per
stage printed when its last request finishes, and ``summary.json`` / ``stages.csv`` /
``report.html`` rewritten after every stage and on every stop path (normal end, guard abort,
Ctrl-C / SIGTERM, fatal error), so nothing gathered is lost.
"""

from __future__ import annotations

import logging
import sys
import time

import gevent

from loadgen import errors
from loadgen.analysis.breakdown import clock_lines
from loadgen.analysis.knee import run_knee
from loadgen.config.run_tags import tags_from_options
from loadgen.errors import ConfigError
from loadgen.export.exporter import exporter_from_config
from loadgen.phases import Phase
from loadgen.report.files import write_results
from loadgen.report.models import models_line
from loadgen.report.stage_extras import extras_line
from loadgen.report.table import format_stage_header, format_stage_row, format_stage_table
from loadgen.run.cache_report import prefix_sharing
from loadgen.run.console import FailureNotices, StageConsole, drift_line, slice_line
from loadgen.run.exporter_feed import ExporterFeed
from loadgen.run.health import stage_client_bound
from loadgen.run.plan import GuardDecided, PhaseStarted, StageFinal, SweepDone, WindowClosed, WindowOpened
from loadgen.run.replica_run import ReplicaRun
from loadgen.run.request_export import RequestFile
from loadgen.run.results import (
    GuardLog,
    RunFacts,
    StageInfo,
    build_summary,
    iso,
    stage_row,
    stage_warnings,
)
from loadgen.run.soak import SliceBook
from loadgen.run.stage_guard import StageGuard
from loadgen.run.unstaged import UnstagedRequests
from loadgen.run_folder.folders import create_run_dir, run_name, settle_run
from loadgen.run_folder.slices_csv import SLICES_CSV, append_slice_rows
from loadgen.server.gpu_watch import GpuWatch
from loadgen.server.overload import OverCapacityRule
from loadgen.server.replica_watch import over_capacity_evidence
from loadgen.server.start_check import StartRefused, preflight
from loadgen.server.watch import ServerWatch
from loadgen.stats.drift import attach, stage_drift
from loadgen.stats.flags import cut_flag
from loadgen.wire.client import check_host
from loadgen.wire.endpoints import PATHS, host_reading, server_root

log = logging.getLogger("llm_loadgen")
# summary.json rewritten during a soak holds this many newest slices (4 h of 60 s slices; slices.csv
# has them all, and the final summary.json too): 4,320 slices (3 days) cost 0.2 s of JSON per write
LIVE_SLICES = 240


def say(line: str) -> None:
    """User-facing progress: stderr, one line, flushed (Locust's stats go to stdout)."""
    print(line, file=sys.stderr, flush=True)


class Session:
    """The run's state on the process that owns it; ``rt`` is that process's Runtime, ``fleet``
    the load-generating processes (``loadgen.fleet.distributed``)."""

    def __init__(self, rt, fleet):
        self.rt, self.fleet = rt, fleet
        self.tags = tags_from_options(getattr(rt.environment, "parsed_options", None))  # ConfigError
        self.started_wall = time.time()
        self.server = None  # preflight.ServerInfo, once the start check passed
        self.watch: ServerWatch | None = None
        self.gpu_watch: GpuWatch | None = None  # DCGM exporters (--gpu-metrics), when one answered
        self.stage_info: dict[int, StageInfo] = {}
        self.rows: list[dict] = []
        self.guard_record = GuardLog()
        self.stop_reason: str | None = None
        self.exit_code: int | None = None
        self.close_seq: dict[int, int] = {}  # stage -> the phase seq that closed its window
        self.worker_losses: list[dict] = []
        self.finished_run = False
        self.started = False
        self.exporter = None
        self.run_dir = None  # the run's own folder under results_dir, created when the run starts
        self.finished_wall: float | None = None  # a web UI run that ended (the process lives on)
        self.console = StageConsole(say)
        self.unstaged = UnstagedRequests(rt)  # requests sent outside the stages (loadgen.run.unstaged)
        self.notices = FailureNotices(rt, say)
        self.stage_guard = StageGuard(rt, fleet, say)  # the KV guard's numbers; the plan calls stage_guard.decide
        self.replicas = ReplicaRun(rt, lambda line: say(rt.redact(line)))  # several replicas (docs/replicas.md)
        self.slice_book: SliceBook | None = None  # stages.slice_s: the soak's time slices (docs/soak.md), from start
        self._written_t = time.perf_counter()

    @property
    def capacity(self):
        """``loadgen.server.replies.Capacity`` from the start check (None before it)."""
        return self.stage_guard.capacity

    # -- start -------------------------------------------------------------------------------------
    def _read_host(self) -> str | None:
        """--host as the user pasted it (the server's root, an OpenAI base URL ending in /v1, a
        gateway's prefix before it), read once: said in one line when it had a path, and
        ``environment.host`` set to its root, which every client and the workers then get
        (``loadgen.wire.endpoints.server_root``). A host that is not a URL is left to the start check."""
        env = self.rt.environment
        try:
            check_host(env.host)
        except ConfigError:
            return env.host
        if (reading := host_reading(env.host, PATHS[self.rt.scenario.endpoint])) is not None:
            say(f"llm-loadgen: {reading}")
        env.host = server_root(env.host)
        return env.host

    def start(self) -> bool:
        """Before the first stage: the start check (``loadgen.server.start_check``), the server watch and
        the exporter. Returns False when the run must not start (the reason is printed and the
        exit code set)."""
        self.started = True
        rt, sc = self.rt, self.rt.scenario
        host = self._read_host()
        self.started_wall = time.time()  # the web UI's run starts at its button, not at process start
        try:
            self.run_dir = create_run_dir(sc.results_dir, self.started_wall, self.tags.run_name(run_name(sc)))
        except OSError as exc:
            self.fatal(errors.EXIT_CONFIG, f"config error: results_dir: cannot create a run folder under "
                       f"{sc.results_dir!r} ({exc}); pass a writable --results-dir")
            return False
        self.slice_book = self._slice_book()
        if sc.requests_jsonl:
            try:
                rt.request_sink = RequestFile(self.run_dir, self.tags.run_name(run_name(sc)))
            except OSError as exc:
                self.fatal(errors.EXIT_CONFIG, f"config error: requests_jsonl: cannot create a file in "
                           f"{self.run_dir} ({exc}); pass a writable --results-dir")
                return False
        try:
            self.replicas.discover(host)
            self.server = preflight(host, sc, rt.api_key, lambda line: say(rt.redact(line)), rt.dataset,
                                    self.replicas.fleet_capacity if rt.targets.watched else None)
        except StartRefused as exc:
            self.unstaged.count(exc.probes)
            self.fatal(exc.exit_code, str(exc))
            return False
        self.unstaged.count(self.server.probes)
        rt.use_model(self.server.model)
        rt.compat = self.server.compat
        self.stage_guard.capacity = cap = self.server.capacity
        self.stage_guard.spread = self.replicas.guard_spread()
        g = sc.guard
        rule = OverCapacityRule(g.over_capacity_queue_fraction, g.over_capacity_queue_share, g.over_capacity_kv_usage)
        if g.watch and rt.targets.watched:  # each replica's /metrics, not the router's or the first host's
            self.replicas.start_watch(g.watch_interval_s, rule)
        elif g.watch and cap.flavor:
            self.watch = ServerWatch(host, rt.api_key, cap.flavor, g.watch_interval_s, rule=rule,
                                     headers=sc.request.headers)
            self.watch.start()
        if sc.gpu_metrics:  # GPU telemetry when it is there: an exporter that does not answer is a warning
            self.gpu_watch = GpuWatch(sc.gpu_metrics, sc.guard.watch_interval_s,
                                      warn=lambda line: say(f"llm-loadgen: warning: {line}")).start()
        try:
            self.exporter = exporter_from_config(sc.exporter.host, sc.exporter.port, ExporterFeed(self))
        except ConfigError as exc:
            self.fatal(errors.EXIT_CONFIG, f"config error: {exc}")
        if self.exporter is not None:
            say(f"llm-loadgen: Prometheus exporter at {self.exporter.url}")
        if self.exit_code is None:
            self.stage_guard.sample_duration(self.unstaged)
        return self.exit_code is None

    def flush_locust_events(self) -> None:
        self.unstaged.flush_to_locust()

    def say_new_failures(self) -> None:
        self.notices.say_new()

    # -- sweep events --------------------------------------------------------------------------------
    def on_event(self, ev, now: float) -> str | None:
        """Act on one of the plan's events. Returns a reason to stop the sweep (only for a
        ``WindowClosed``: the server was over capacity and ``guard.abort_on_over_capacity``)."""
        rt = self.rt
        match ev:
            case PhaseStarted(stage=k, phase=phase, concurrency=c, search=search):
                pending = self._rows_pending()
                if phase is Phase.RAMP and rt.scenario.open_loop:
                    parts = self.fleet.assign_parts()
                    rt.set_arrivals(c, None if self.fleet.master else 0, parts)
                    info = self.stage_info[k] = StageInfo(k, c, rate_per_s=c, parts=parts, search=search)
                    self.console.notice(f"llm-loadgen: stage {k} {info.label} over {parts} process(es): ramp"
                                        f"{' (SLO search)' if search else ''}", pending)
                elif phase is Phase.RAMP:
                    info = self.stage_info[k] = StageInfo(k, c, search=search)
                    self.console.notice(f"llm-loadgen: stage {k} {info.label}: ramp{' (SLO search)' if search else ''}",
                                        pending)
                rt.set_phase(k, phase)
                self.console.phase_started(now)
            case GuardDecided(decision=d):
                if d.breach:
                    self.console.notice(f"llm-loadgen: guard: {d.message}", self._rows_pending())
                self.guard_record.record(d)
            case WindowOpened(stage=k, t=t, capped=capped):
                info = self.stage_info[k]
                info.open_t, info.open_wall = t, time.time()
                if capped:
                    info.flags.append("warmup_capped")
                # the GPUs' open edge read beside the server's (a slow exporter does not move the server's)
                gpu = gevent.spawn(self.gpu_watch.begin_stage, k) if self.gpu_watch else None
                if self.watch:
                    self.watch.begin_stage(k, info.concurrency)
                self.replicas.begin_stage(k, info.concurrency)
                if self.slice_book is not None:
                    self.slice_book.opened(k)
                if gpu is not None:
                    gpu.join()
            case WindowClosed():
                return self._close_window(ev)
            case StageFinal(stage=k, forced=forced):
                self._finalize(k, forced=forced)
            case SweepDone(reason=reason):
                self.stop_reason = reason
                if reason in ("guard_abort", "server_over_capacity"):
                    self.exit_code = errors.EXIT_GUARD_ABORT
                self.finished_run = True
                rt.set_phase(rt.stage, Phase.DONE)
        return None

    def _close_window(self, ev: WindowClosed) -> str | None:
        """Record the window, tell every worker it closed (the plan's CLOSING phase, adopted just
        before), then read the server watch for it once."""
        k, info = ev.stage, self.stage_info[ev.stage]
        info.window_s, info.users, info.early = ev.t - info.open_t, ev.users, ev.early
        if self.slice_book is not None:
            self.slice_book.window_closed(k, info.window_s)
        if ev.early is not None:
            self.console.notice(f"llm-loadgen: stage {k} {info.label}: window closed after {info.window_s:.0f} s "
                                f"of {self.rt.scenario.stages.duration_s:g}, SLO {ev.early.text()} "
                                "(slo.early_stop)", self._rows_pending())
        self.fleet.broadcast_phase()  # nothing counts toward the window anywhere from here on
        # the CLOSING phase just sent: a worker on it starts no request of stage k. (Not the phase
        # after it: with SLO isolation that comes only once stage k is final, after drain_s.)
        self.close_seq[k] = self.rt.phase_seq
        if info.rate_per_s is not None:
            self.stage_guard.learn(self.rt.collector.stages.get(k))  # Little's law W for the next stage
        gpu = gevent.spawn(self.gpu_watch.end_stage, k) if self.gpu_watch else None  # beside the server's read
        server = info.server = self.watch.end_stage(k) if self.watch else None
        info.replica_servers = self.replicas.end_stage(k)
        if gpu is not None:
            info.gpu = gpu.get()
        if (evidence := over_capacity_evidence(info.replica_servers)) and self.rt.scenario.guard.abort_on_over_capacity:
            say(f"llm-loadgen: guard: a replica was over capacity during stage {k} ({info.label}: "
                f"{'; '.join(evidence)}); stopping the sweep (guard.abort_on_over_capacity)")
            return "server_over_capacity"
        if server is None:
            return None
        if server.get("over_capacity") and self.rt.scenario.guard.abort_on_over_capacity:
            say(f"llm-loadgen: guard: the server was over capacity during stage {k} "
                f"({info.label}: {'; '.join(server.get('over_capacity_evidence') or [])}); "
                "stopping the sweep (guard.abort_on_over_capacity)")
            return "server_over_capacity"
        return None

    def stage_done(self, k: int) -> bool:
        """Stage ``k`` is final: its window's close was told to every process (``close_seq``) and
        none runs a request of it (``Fleet.stage_done``). False until this session has acted on
        the ``WindowClosed``: the plan asks in the very tick that closes the window, before its
        events reach the session, and a master then knew no closing seq to wait for: every
        worker's last report counted (one sent before the window's first request, in flight 0),
        and the stage's row was built before its requests' results came in (seen under load
        with two workers: a stage of 0 requests whose workers had made 68)."""
        return k in self.close_seq and self.fleet.stage_done(k, self.close_seq[k])

    def _finalize(self, k: int, forced: bool, flag: str = "drain_timeout") -> None:
        rt, sc = self.rt, self.rt.scenario
        info, stats = self.stage_info[k], rt.collector.stages.get(k)
        client = self.fleet.stage_health(k)
        open_loop = stats is not None and info.rate_per_s is not None and stats.schedule_lateness_s.count
        bound = stage_client_bound(client, stats.schedule_lateness_s.quantile(0.99) if open_loop else None,
                                   sc.client_check)
        # forced: still running, or already killed by the stop (Locust stops users before `quitting`);
        # cancelled requests are merged from every process
        unfinished = self.fleet.inflight(k) + (stats.cancelled_requests if stats else 0) if forced else None
        if unfinished == 0:  # nothing was cut: the stop came between its last request and its row
            unfinished = None
        mix = sc.model_mix.names if sc.model_mix is not None else ()
        row = stage_row(info, stats, self.guard_record, client, bound, unfinished, flag, sc.slo, sc.cost,
                        rt.collector.models.get(k), mix)
        by_replica = self.replicas.add_to_row(row, rt.collector.replicas.get(k), info.replica_servers)
        self.rows.append(row)
        drifted = self._attach_drift(k)  # before the row is printed: its flag shows
        if len(self.rows) == 1:
            say(format_stage_header(info.rate_per_s is not None, slo=sc.slo.enabled))
        say(format_stage_row(row))
        if drifted:
            say(drift_line(k, row))
        if (extras := extras_line(row)) is not None:
            say(extras)
        if (by_model := models_line(row)) is not None:
            say(by_model)
        if by_replica is not None:
            say(by_replica)
        sharing = prefix_sharing(sc.workload.turns, sc.prompt.shared_prefix_tokens,
                                 any(r.hash_ids for r in rt.dataset or ()))
        for line in stage_warnings(row, *sc.expected_lengths(), sharing) + clock_lines(self.rows):
            say(line)
        if not self._rows_pending():
            self.console.flush()
        self.write()

    # -- console ------------------------------------------------------------------------------------
    def _rows_pending(self) -> bool:
        """A stage's window closed and its row is not printed yet (its last requests still run)."""
        written = {r["index"] for r in self.rows}
        return any(info.closed and k not in written for k, info in self.stage_info.items())

    def progress(self, now: float) -> None:
        """Headless: the progress line (``loadgen.run.console``); the web UI has its tabs."""
        rt, opts = self.rt, self.rt.environment.parsed_options
        if opts is None or not opts.headless:
            return
        info = self.stage_info.get(rt.stage) if rt.stage is not None else None
        self.console.progress(now, rt.stage, rt.kind, info.label if info else None,
                              rt.collector.stages.get(rt.stage), info.open_t if info else None,
                              self._rows_pending(), self.fleet.inflight_total())

    # -- time slices (docs/soak.md) ---------------------------------------------------------------------
    def _slice_book(self) -> SliceBook | None:
        slice_s = self.rt.scenario.stages.slice_s
        if not slice_s:
            return None
        from locust.runners import WORKER_REPORT_INTERVAL

        # a master waits for two worker reports after a slice's end; a local run has every count at once
        grace_s = 2 * WORKER_REPORT_INTERVAL + 1.0 if self.fleet.master else 1.0

        def cut_server(first: bool) -> dict | None:
            return self.watch.cut_slice(first) if self.watch is not None else None

        def client_now() -> dict:
            cpu, lag = self.fleet.health_now()
            return {"cpu_percent": cpu, "loop_lag_s": lag}

        return SliceBook(slice_s, self.rt.collector, grace_s=grace_s, cut_server=cut_server, client_now=client_now)

    def close_slices(self, force: bool = False) -> None:
        """Every tick: the slices that closed go to slices.csv (appended at once) and the console;
        summary.json is rewritten with them (at most every 5 s, and at least once a minute while a
        soak's window is open). ``force``: the run stops, every slice begun closes now."""
        book = self.slice_book
        if book is None or self.run_dir is None:
            return
        stage = book.stage
        rows = book.tick(force=force)
        if rows:
            try:
                append_slice_rows(self.run_dir / SLICES_CSV, rows)
            except OSError as exc:
                log.warning("could not append to %s: %s", self.run_dir / SLICES_CSV, exc)
            info = self.stage_info.get(stage)
            for row in rows:
                self.console.notice(slice_line(row, info.label if info else None, self.rt.scenario.stages.duration_s),
                                    self._rows_pending())
        if stage is not None and book.stage is None and self._attach_drift(stage):
            # the stage's row is out already: said, and rewritten (the stop path writes anyway)
            self.console.notice(drift_line(stage, next(r for r in self.rows if r.get("index") == stage)),
                                self._rows_pending())
            if not force:
                self.write()
        now = time.perf_counter()
        if not force and stage is not None and (rows and now - self._written_t >= 5.0 or now - self._written_t >= 60.0):
            self.write()

    def _attach_drift(self, k: int) -> bool:
        """Stage k's drift verdict (``loadgen.stats.drift``) onto its row, once its row is made and
        its last slice closed; True when attached now."""
        book = self.slice_book
        row = next((r for r in self.rows if r.get("index") == k), None)
        if book is None or row is None or "drift" in row or book.stage == k:
            return False
        attach(row, stage_drift([r for r in book.rows if r["stage"] == k], book.slice_s, self.rt.scenario.drift))
        return True

    # -- workers ------------------------------------------------------------------------------------
    def check_workers(self, now: float | None = None) -> None:
        """Master: a worker that stopped reporting is recorded as lost, with what it had running
        booked against the stages it ran in (``loadgen.fleet.worker_loss``; what it reported stays
        counted). Open loop: a lost worker's share of the rate is not sent for the rest of the
        stage; the stage records it (``StageInfo.lose_part``: a lower offered rate, flagged
        ``worker_lost``)."""
        rt = self.rt
        for lost in self.fleet.drop_lost():
            info = self.stage_info.get(rt.stage)
            if info is not None and info.rate_per_s is not None and lost.client_id in self.fleet.parts:
                info.lose_part(now if now is not None else info.open_t or 0.0)
            for k, n in lost.running.items():
                if k is not None and k in self.stage_info:
                    self.stage_info[k].add_lost(n)
            died_in = self.stage_info.get(lost.stage)  # where it was last heard (loadgen.fleet.worker_loss)
            self.worker_losses.append({
                "worker": lost.client_id, "at": iso(time.time()), "stage": lost.stage,
                **(died_in.load_fields() if died_in else {"concurrency": None}), **lost.record(self.fleet.wall_iso),
            })
            say(f"llm-loadgen: {lost.describe()}")

    # -- stop paths --------------------------------------------------------------------------------
    def server_unusable(self, message: str) -> None:
        """``rt.fatal``'s route on the owning process: the target cannot be load-tested (exit 4)."""
        self.fatal(errors.EXIT_SERVER_UNUSABLE, message)

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
        if isinstance(self.rt.request_sink, RequestFile):
            self.rt.request_sink.close()

    def on_quitting(self) -> None:
        if self.finished_wall is not None:  # a web UI run finished earlier; the process quits now
            self.rt.environment.process_exit_code = self.exit_code
            if self.exporter is not None:
                self.exporter.stop()
            return
        self._conclude()
        if self.exporter is not None:
            self.exporter.stop()
        self.write(final=False)
        self._print_end()

    def on_runner_stopped(self) -> None:
        """Web UI: the runner stopped (the sweep ended, or the Stop button). The run is over while
        the UI stays up: final results with plots, ``ended_at``, the exit code, the final table;
        the LLM tabs say "finished". A master first collects every live worker's final report
        (``loadgen.fleet.final_reports``, as a headless stop does) and books a worker that sent none."""
        if not self.started or self.finished_wall is not None:
            return
        if self.fleet.finals is not None:
            self.fleet.finals.stop()
            self.check_workers()
        self._conclude()
        self.finished_run = True  # the UI's Start again gets the one line of loadgen/locust_face/shape.py
        self.finished_wall = time.time()
        self.rt.set_phase(self.rt.stage, Phase.DONE)
        self.fleet.broadcast_phase()
        self.write(final=True)
        self._print_end()

    def _conclude(self) -> None:
        """The stop reason and exit code (Locust's rule when nothing else decided it), the server
        watch stopped, and every stage whose window closed written (flagged when cut short)."""
        env = self.rt.environment
        self.say_new_failures()
        self.flush_locust_events()
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
        self.close_slices(force=True)  # the slice under way too, as a partial one
        if self.watch:
            self.watch.stop()
        self.replicas.stop()
        if self.gpu_watch:
            self.gpu_watch.stop()
        # A stage whose window closed but whose last requests were still running when the run was
        # stopped (Ctrl-C, SIGTERM, fatal error) is written too, flagged with what cut it short.
        written = {r["index"] for r in self.rows}
        for k, info in sorted(self.stage_info.items()):
            if info.closed and k not in written:
                self._finalize(k, forced=True, flag=cut_flag(self.stop_reason))
        self.console.flush()

    def _print_end(self) -> None:
        """The final table (with the legend of the flags it shows) and where the results are."""
        if self.rows:
            summary = self.summary(final=True)
            say(format_stage_table(self.rows, self.knee(), guard=summary["guard"],
                                   threshold=self.rt.scenario.knee.threshold, slo=summary["slo"],
                                   open_loop=self.rt.scenario.open_loop))
        if self.run_dir is not None:
            code = "" if self.exit_code is None else f" (exit code {self.exit_code})"
            words = errors.STOP_WORDS.get(self.stop_reason, self.stop_reason)
            say(f"llm-loadgen: {words}; results in {self.run_dir}/{code}")

    # -- results -------------------------------------------------------------------------------------
    def knee(self) -> float | None:
        """The concurrency knee, or in open-loop mode the highest offered rate sustained."""
        return run_knee(self.rows, self.rt.scenario.open_loop, self.rt.scenario.knee.threshold)

    def summary(self, final: bool = False) -> dict:
        rt = self.rt
        exit_code = self.exit_code if self.exit_code is not None else (0 if final else None)
        ended = (self.finished_wall or time.time()) if final else None
        mix = rt.scenario.model_mix  # a mix of models: run.model is the mix (a=0.7,b=0.3), as --model takes it
        run = RunFacts(self.started_wall, ended, rt.environment.host, mix.text() if mix else rt.model_name,
                       rt.scenario.endpoint, exit_code, self.stop_reason, self.fleet.workers, self.worker_losses,
                       self.tags.run_name(run_name(rt.scenario)))
        summary = self.tags.into_summary(build_summary(
            run, rt.scenario, self.capacity, self.guard_record, self.rows, self.knee(), rt.collector.totals,
            self.server.compat if self.server else None, (self.unstaged.outcomes, self.unstaged.stats), rt.dataset))
        self.replicas.into_summary(summary)
        if self.slice_book is not None:  # while running, the newest LIVE_SLICES: every one is in slices.csv
            rows = self.slice_book.rows
            summary["slices"] = list(rows if final else rows[-LIVE_SLICES:])
            summary["slices_total"] = len(rows)
        return summary

    def write(self, final: bool = False) -> None:
        if self.run_dir is None:  # the run never started (a web UI closed before its first run)
            return
        self._written_t = time.perf_counter()
        if isinstance(self.rt.request_sink, RequestFile):
            self.rt.request_sink.flush()  # the requests so far on disk whenever the results are
        try:
            # Plots cost ~0.6 CPU-s: only once the run is over, never while requests are timed.
            write_results(self.run_dir, self.summary(final), plots=final and self.rt.scenario.plots,
                          final=final)
            settle_run(self.run_dir, measured=bool(self.rows), reason=self.stop_reason)
        except Exception as exc:  # never lose the run to a report problem
            log.exception("writing results failed: %s", exc)
