"""Locust event listeners: command-line options, the per-process Runtime, and the run's Session.

Imported by ``locustfile.py`` for its side effects (listeners on Locust's global ``events``).
"""

from __future__ import annotations

import signal
from urllib.parse import urlsplit

import gevent
from locust import events

from loadgen.config import ConfigError, Shown, exit_on_config_error, register_options
from loadgen.runtime import install
from loadgen.session import Session
from loadgen.webui import install_webui

__all__: list[str] = []


@events.init_command_line_parser.add_listener
def _options(parser, **_):
    register_options(parser)


@events.init.add_listener
def _init(environment, **_):
    try:
        rt = install(environment)
    except ConfigError as err:
        exit_on_config_error(err)
    if not rt.is_worker:
        if environment.parsed_options is not None and environment.parsed_options.headless:
            try:  # the web UI may still get a host; a headless run must have a usable one now
                check_host(environment.host)
            except ConfigError as err:
                exit_on_config_error(err)
        rt.session = Session(rt)
        _interrupt_on_signals(environment)
        if environment.web_ui:
            install_webui(environment)

        @environment.events.quitting.add_listener
        def _quitting(environment, **_):
            rt.session.on_quitting()

        @environment.events.quit.add_listener
        def _quit(**_):
            rt.session.on_quit()


def check_host(host: str | None) -> None:
    """ConfigError unless ``host`` is an http(s) base URL (what StreamClient needs)."""
    fix = "pass the server's base URL, e.g. --host http://127.0.0.1:8000"
    if not host:
        raise ConfigError("--host", Shown("nothing"), "a target server is required", fix)
    parts = urlsplit(host)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError("--host", host, "must be an http:// or https:// URL with a host name", fix)


def _interrupt_on_signals(environment) -> None:
    """Ctrl-C and SIGTERM stop the run the way Locust stops it on Ctrl-C: KeyboardInterrupt in the
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
