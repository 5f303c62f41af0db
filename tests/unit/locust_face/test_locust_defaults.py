"""What we change in Locust's defaults: loopback binds, a quiet headless console, no spawn-rate warning."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from locust.argument_parser import parse_options

import loadgen.locust_face.plugin  # noqa: F401  (registers our options on Locust's parser)
from loadgen.locust_face.defaults import (
    STATS_LOGGER,
    drop_runner_noise,
    exposure_warnings,
    is_loopback,
    quiet_console,
)

LOCUSTFILE = ["-f", "locustfile.py"]


def test_locust_parser_binds_web_ui_and_master_port_to_loopback_by_default(monkeypatch):
    monkeypatch.delenv("LOCUST_WEB_HOST", raising=False)
    monkeypatch.delenv("LOCUST_MASTER_BIND_HOST", raising=False)
    opts = parse_options(LOCUSTFILE)
    assert (opts.web_host, opts.master_bind_host) == ("127.0.0.1", "127.0.0.1")
    opts = parse_options([*LOCUSTFILE, "--web-host", "*", "--master-bind-host", "10.0.0.7"])
    assert (opts.web_host, opts.master_bind_host) == ("*", "10.0.0.7")  # asking for more still works
    monkeypatch.setenv("LOCUST_WEB_HOST", "0.0.0.0")
    assert parse_options(LOCUSTFILE).web_host == "0.0.0.0"


@pytest.mark.parametrize("host,loop", [("127.0.0.1", True), ("127.0.1.1", True), ("localhost", True),
                                       ("::1", True), ("", False), ("*", False), ("0.0.0.0", False),
                                       ("10.0.0.5", False), ("::", False)])
def test_loopback(host, loop):
    assert is_loopback(host) is loop


def test_a_warning_for_each_listener_beyond_loopback():
    safe = SimpleNamespace(web_host="127.0.0.1", master_bind_host="127.0.0.1", web_login=False)
    assert exposure_warnings(safe, web_ui=True, master=True) == []
    wide = SimpleNamespace(web_host="", master_bind_host="*", master_bind_port=5557, web_login=False)
    web, master = exposure_warnings(wide, web_ui=True, master=True)
    assert "web UI listens on every interface (--web-host), WITHOUT a login" in web
    assert "--web-login" in web and "docs/distributed.md 'Exposing the web UI and the master'" in web
    assert "worker port 5557 listens on every interface (--master-bind-host)" in master
    assert exposure_warnings(wide, web_ui=False, master=False) == []  # headless local run: none open
    login = SimpleNamespace(web_host="10.0.0.5", master_bind_host="127.0.0.1", web_login=True)
    (line,) = exposure_warnings(login, web_ui=True, master=True)
    assert "listens on 10.0.0.5 (--web-host) with a login page" in line


def _locust_table_printed() -> bool:
    record = logging.LogRecord(STATS_LOGGER, logging.INFO, __file__, 1, "Aggregated  42  0(0.00%)", None, None)
    return all(f.filter(record) for f in logging.getLogger(STATS_LOGGER).filters)


@pytest.mark.parametrize("headless,print_stats,only_summary,periodic,final", [
    (True, False, False, False, False),  # the default: the run's own table is the last thing printed
    (True, True, False, True, True),  # --print-stats: Locust's tables, every 2 s and at the end
    (True, False, True, False, True),  # --only-summary: Locust's final tables only
    (False, False, False, True, True),  # the web UI: Locust's behaviour untouched
])
def test_headless_console_drops_locusts_tables_unless_asked(headless, print_stats, only_summary, periodic, final):
    opts = SimpleNamespace(headless=headless, print_stats=print_stats, only_summary=only_summary)
    try:
        quiet_console(opts)
        # Locust's main.py spawns its periodic printer only when only_summary is false
        assert (not opts.only_summary and (print_stats or not headless)) is periodic
        assert _locust_table_printed() is final
        quiet_console(opts)  # a second call: the options now say only_summary, the decision stays
        assert _locust_table_printed() is final
    finally:
        quiet_console(None)
    assert _locust_table_printed()


def _passes(level: int, msg: str, logger: str = "locust.runners") -> bool:
    record = logging.LogRecord(logger, level, __file__, 1, msg, None, None)
    return all(f.filter(record) for f in logging.getLogger(logger).filters)


def test_spawn_rate_warning_and_per_stage_info_are_dropped():
    drop_runner_noise(SimpleNamespace(loglevel="INFO", headless=True))
    assert not _passes(logging.INFO, "Shutting down (exit code 3)", "locust.main")  # our last line has it
    assert _passes(logging.INFO, "Starting Locust 2.47.0", "locust.main")
    drop_runner_noise(SimpleNamespace(loglevel="INFO", headless=False))  # the web UI: Locust's line stays
    assert _passes(logging.INFO, "Shutting down (exit code 3)", "locust.main")
    drop_runner_noise(SimpleNamespace(loglevel="INFO"))
    assert not _passes(logging.WARNING, "Your selected spawn rate is very high (>100), and this is ...")
    assert not _passes(logging.INFO, "Ramping to 4 users at a rate of 4.00 per second")
    assert not _passes(logging.INFO, "Shape test updating to 4 users at 4.00 spawn rate")
    assert _passes(logging.INFO, "Shape test stopping") and _passes(logging.WARNING, "Ramping to something odd")
    drop_runner_noise(SimpleNamespace(loglevel="DEBUG"))  # asked for everything: the INFO lines are back
    assert _passes(logging.INFO, "Ramping to 4 users at a rate of 4.00 per second")
    assert not _passes(logging.WARNING, "Your selected spawn rate is very high (>100/worker), and ...")
    drop_runner_noise(SimpleNamespace(loglevel="INFO"))
