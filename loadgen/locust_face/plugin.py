"""Every Locust event hook and custom message of llm-loadgen, registered here and nowhere else.

Command-line options (``init_command_line_parser``); at ``init``: the per-process ``Runtime``
(``environment.llm``) and ``Fleet``, and on the process that owns the run its ``Session``
(``environment.llm_run``). ``_hook`` wires them into Locust: which object answers which event or
message, on which kind of process, and where ``rt.fatal`` goes. The objects only expose handlers.

Imported by ``locustfile.py`` for its side effects (listeners on Locust's global ``events``).
"""

from __future__ import annotations

import functools
import os
import signal
import socket
import sys

import gevent
from locust import events

from loadgen.config import ConfigError, exit_on_config_error, register_options
from loadgen.config.options import repeatable_host
from loadgen.fleet.distributed import FATAL_MESSAGE, PHASE_MESSAGE, Fleet
from loadgen.fleet.final_reports import FINAL_MESSAGE, FINAL_REPORT_MESSAGE, WorkerFinal
from loadgen.locust_face.defaults import (
    drop_runner_noise,
    exposure_warnings,
    quiet_console,
    set_loopback_defaults,
)
from loadgen.locust_face.shape import SweepShape, shape_loop
from loadgen.locust_face.webui import install_webui
from loadgen.run.runtime import install
from loadgen.run.session import Session
from loadgen.wire.client import check_host

__all__: list[str] = []


def _memoize_locust_default_options() -> None:
    """Locust 2.47's WorkerRunner filters the master's options with ``k not in
    argument_parser.default_args_dict()`` once per option of every spawn message, and each call
    builds a whole argument parser: 0.1-0.3 CPU-s per message, enough to miss heartbeats during a
    ramp with many workers. The defaults never change within a process: build them once."""
    from locust import argument_parser

    build = argument_parser.default_args_dict
    if not getattr(build, "_llm_loadgen_memo", False):
        cached = functools.lru_cache(maxsize=1)(build)
        cached._llm_loadgen_memo = True
        argument_parser.default_args_dict = cached


_memoize_locust_default_options()


@events.init_command_line_parser.add_listener
def _options(parser, **_):
    register_options(parser)
    repeatable_host(parser)
    set_loopback_defaults(parser)
    if _forks_workers(sys.argv[1:], os.environ):
        # Locust's --processes forks workers that dial --master-port (5557 unless given) while the
        # in-process master binds --master-bind-port: two such runs on one host would collide on
        # 5557. Unless the user chose ports, both default to one free ephemeral port of this run.
        port = _free_port()
        parser.set_defaults(master_port=port, master_bind_port=port)


def _forks_workers(argv: list[str], env) -> bool:
    """``--processes`` asked for (command line or LOCUST_PROCESSES) and no master port chosen."""
    flags = {a.split("=", 1)[0] for a in argv}
    asked = "--processes" in flags or bool(env.get("LOCUST_PROCESSES"))
    chosen = flags & {"--master-port", "--master-bind-port"} or env.get("LOCUST_MASTER_PORT") or env.get(
        "LOCUST_MASTER_BIND_PORT")
    return asked and not chosen


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@events.init.add_listener
def _init(environment, **_):
    try:
        rt = install(environment)
    except ConfigError as err:
        exit_on_config_error(err)
    if getattr(environment.parsed_options, "repeat", None):
        # one Locust process is one run: the llm-loadgen command starts one per repetition
        exit_on_config_error(ConfigError("--repeat", environment.parsed_options.repeat, "runs the sweep as N "
                                         "Locust runs, which the llm-loadgen command starts one after another",
                                         "run llm-loadgen --repeat N with the same options"))
    fleet = Fleet(rt)
    drop_runner_noise(environment.parsed_options)
    quiet_console(environment.parsed_options)
    session = None
    if not rt.is_worker:
        for line in exposure_warnings(environment.parsed_options, environment.web_ui is not None, rt.is_master):
            print(line, file=sys.stderr, flush=True)
        if environment.parsed_options is not None and environment.parsed_options.headless:
            try:  # the web UI may still get a host; a headless run must have a usable one now
                check_host(environment.host)
            except ConfigError as err:
                exit_on_config_error(err)
        try:
            session = environment.llm_run = Session(rt, fleet)
        except ConfigError as err:  # --label or --metadata
            exit_on_config_error(err)
        _interrupt_on_signals(environment)
        if environment.web_ui:
            install_webui(environment)
    _hook(environment, rt, fleet, session)


def _hook(environment, rt, fleet: Fleet, session: Session | None) -> None:
    """Locust's events and our messages, each to the one object that answers it."""
    events, runner = environment.events, environment.runner
    events.test_start.add_listener(rt.on_test_start)
    events.test_stop.add_listener(rt.on_test_stop)
    events.report_to_master.add_listener(fleet.on_report_to_master)
    events.worker_report.add_listener(fleet.on_worker_report)
    events.heartbeat_sent.add_listener(fleet.on_heartbeat)  # on the master: a worker's heartbeat arrived
    events.quit.add_listener(fleet.on_quit)
    if runner is not None and rt.is_worker:
        runner.register_message(PHASE_MESSAGE, fleet.on_phase_message)
        runner.register_message(FINAL_MESSAGE, WorkerFinal(runner).on_final)
        rt.on_fatal = fleet.tell_master
    elif runner is not None and rt.is_master:
        runner.register_message(FATAL_MESSAGE, fleet.on_fatal_message)
        runner.register_message(FINAL_REPORT_MESSAGE, fleet.finals.on_final_report)
        runner.quit = fleet.finals.quit_after(runner.quit)
    if session is None:
        return
    rt.on_fatal = session.server_unusable
    if runner is not None and isinstance(environment.shape_class, SweepShape):
        runner.shape_worker = functools.partial(shape_loop, runner)  # the plan ticked 5 times a second

    def _quitting(environment, **_):
        if fleet.finals is not None and session.finished_wall is None:
            # a master: every live worker's final report in (it stops the run first), and a
            # worker that did not deliver booked, before the stages are concluded
            fleet.finals.stop()
            shape = environment.shape_class
            session.check_workers(shape.get_run_time() if shape is not None else None)
        session.on_quitting()

    events.quitting.add_listener(_quitting)
    events.quit.add_listener(lambda **_: session.on_quit())
    if environment.web_ui:  # the run ends; the web UI stays up (a greenlet: a master waits)
        events.test_stop.add_listener(lambda **_: gevent.spawn(session.on_runner_stopped))


def _interrupt_on_signals(environment) -> None:
    """Ctrl-C, SIGTERM and (headless) SIGHUP stop the run the way Locust stops it on Ctrl-C: KeyboardInterrupt in the
    main greenlet, then ``quitting`` (results written, exit code 130).

    Locust 2.47 installs its SIGTERM handler only after a headless shape run has ended, so SIGTERM
    mid-run killed the process with nothing written. And Python's own Ctrl-C handler raises
    KeyboardInterrupt in whatever greenlet runs at that instant: a user (a traceback) or the shape
    while it writes results (a half-written report). A gevent signal watcher runs in the hub
    instead, and throws the interrupt into the main greenlet only, where Locust expects it. In the
    web UI, Locust's own SIGTERM handler is installed before any run and is left alone.
    """
    hub = gevent.get_hub()

    def interrupt() -> None:
        hub.loop.run_callback(hub.parent.throw, KeyboardInterrupt)

    gevent.signal_handler(signal.SIGINT, interrupt)
    if environment.parsed_options is None or environment.parsed_options.headless:
        gevent.signal_handler(signal.SIGTERM, interrupt)
        # a soak outlives its terminal: a closed ssh session's SIGHUP stops it as SIGTERM does (results written)
        gevent.signal_handler(signal.SIGHUP, interrupt)
