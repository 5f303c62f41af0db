"""What llm-loadgen changes in Locust's own defaults, and why.

- **Loopback by default.** Locust binds its web UI (``--web-host``) and the master's worker port
  (``--master-bind-host``) to every interface, without a login: anyone who reaches the load host
  could start, resize or re-target a sweep, or join as a worker. Here both default to 127.0.0.1;
  asking for more (another address, ``*``, ``0.0.0.0``; also through ``LOCUST_WEB_HOST`` /
  ``LOCUST_MASTER_BIND_HOST``) works and prints a warning naming the safer way (docs/distributed.md
  'Exposing the web UI and the master').
- **A quiet headless console that ends with the stage table.** Locust prints its stats table every
  ~2 s in a headless run, and its final tables (requests, percentiles, errors: all stages lumped
  together) at shutdown, after the run's own final stage table and flag legend, burying them. The
  run's progress line and stage rows say what matters, so a headless run prints neither: its last
  lines are the stage table, the legend and where the results are. ``--print-stats`` brings back
  both of Locust's (periodic and final), ``--only-summary`` the final ones; ``--csv``, ``--html`` and
  ``--json`` are untouched.
- **No spawn-rate warning.** The sweep shape chooses every spawn rate (C / stages.ramp_s); Locust's
  "spawn rate is very high (>100)" warning would blame the user for a rate they never chose. Nor,
  below ``--loglevel DEBUG``, Locust's INFO lines per stage ("Shape test updating to",
  "Ramping to", "All users spawned", a master's "Sending spawn jobs"): the stage's own ramp line
  says it; nor, headless, its "Shutting down (exit code N)" after the final table (the run's last
  line, "results in ... (exit code N)", says it).
"""

from __future__ import annotations

import logging

LOOPBACK = "127.0.0.1"
_LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
SPAWN_RATE_WARNING = "Your selected spawn rate is very high"
EXPOSE_HINT = ("put a login in front (--web-login, or a reverse proxy with authentication) or keep it on a "
               "private network; see docs/distributed.md 'Exposing the web UI and the master'")


def set_loopback_defaults(parser) -> None:
    """Locust's parser (``init_command_line_parser``): web UI and master port on 127.0.0.1."""
    parser.set_defaults(web_host=LOOPBACK, master_bind_host=LOOPBACK)


def is_loopback(host: str | None) -> bool:
    """127.0.0.0/8, localhost or ::1; '' and '*' (Locust: every interface) are not."""
    host = (host or "").strip()
    return host in _LOOPBACK_NAMES or host.startswith("127.")


def exposure_warnings(options, web_ui: bool, master: bool) -> list[str]:
    """One warning line per listener bound beyond loopback (pure: reads ``options``)."""
    out = []
    web_host = getattr(options, "web_host", LOOPBACK)
    if web_ui and not is_loopback(web_host):
        where = "every interface" if web_host in ("", "*") else web_host
        login = " with a login page" if getattr(options, "web_login", False) else ", WITHOUT a login"
        out.append(f"llm-loadgen: warning: the web UI listens on {where} (--web-host){login}: anyone "
                   "who reaches it can start, resize or re-target a sweep; " + EXPOSE_HINT)
    bind = getattr(options, "master_bind_host", LOOPBACK)
    if master and not is_loopback(bind):
        where = "every interface" if bind in ("", "*") else bind
        port = getattr(options, "master_bind_port", 5557)
        out.append(f"llm-loadgen: warning: the master's worker port {port} listens on {where} "
                   "(--master-bind-host): anyone who reaches it can join the run as a worker; keep "
                   "it on a private network or a firewalled port")
    return out


class _DropAll(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return False


_LOCUST_TABLES = _DropAll()
STATS_LOGGER = "locust.stats_logger"  # Locust prints its stats tables through this logger only


def quiet_console(options) -> None:
    """A headless run: no periodic Locust stats table unless ``--print-stats``; no final Locust
    tables unless ``--print-stats`` or ``--only-summary`` (module docstring). Decided once from the
    options as the user gave them (``options.llm_locust_tables``: (periodic, final) wanted), so a
    second call keeps it."""
    logger = logging.getLogger(STATS_LOGGER)
    logger.removeFilter(_LOCUST_TABLES)
    if options is None or not getattr(options, "headless", False):
        return
    if getattr(options, "llm_locust_tables", None) is None:
        periodic = bool(getattr(options, "print_stats", False))
        options.llm_locust_tables = (periodic, periodic or bool(getattr(options, "only_summary", False)))
    periodic, final = options.llm_locust_tables
    if not periodic:
        options.only_summary = True
    if not final:
        logger.addFilter(_LOCUST_TABLES)


PER_STAGE_INFO = ("Shape test updating to", "Ramping to", "All users spawned", "Sending spawn jobs")
EXIT_INFO = "Shutting down (exit code"  # locust.main, after our final table; our last line has the code


class _RunnerNoise(logging.Filter):
    """Drops the spawn-rate warning; unless ``keep_info``, the per-stage INFO lines and, in a
    headless run, Locust's "Shutting down (exit code N)" (the run's last line says the code)."""

    keep_info = False
    headless = False

    def filter(self, record: logging.LogRecord) -> bool:
        msg = str(record.msg)
        if msg.startswith(SPAWN_RATE_WARNING):
            return False
        if self.keep_info or record.levelno != logging.INFO:
            return True
        return not (msg.startswith(PER_STAGE_INFO) or (self.headless and msg.startswith(EXIT_INFO)))


_FILTER = _RunnerNoise()


def drop_runner_noise(options) -> None:
    """Install the filter on Locust's runner and main loggers (module docstring); idempotent."""
    _FILTER.keep_info = str(getattr(options, "loglevel", "INFO")).upper() == "DEBUG"
    _FILTER.headless = bool(getattr(options, "headless", False))
    for name in ("locust.runners", "locust.main"):
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
