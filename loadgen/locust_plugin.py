"""Locust event listeners: command-line options, the per-process Runtime, and the run's Session.

Imported by ``locustfile.py`` for its side effects (listeners on Locust's global ``events``).
"""

from __future__ import annotations

import signal

from locust import events

from loadgen.config import ConfigError, exit_on_config_error, register_options
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
        rt.session = Session(rt)
        # Locust (2.47) installs its SIGTERM handler only after a headless shape run has ended, so a
        # SIGTERM mid-run would kill the process with nothing written. Treat it like Ctrl-C, which
        # Locust handles: the run stops, the results are written, the exit code is 130.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        if environment.web_ui:
            install_webui(environment)

        @environment.events.quitting.add_listener
        def _quitting(environment, **_):
            rt.session.on_quitting()

        @environment.events.quit.add_listener
        def _quit(**_):
            rt.session.on_quit()
