"""What llm-loadgen changes in Locust's own defaults, and why.

- **Loopback by default.** Locust binds its web UI (``--web-host``) and the master's worker port
  (``--master-bind-host``) to every interface, without a login: anyone who reaches the load host
  could start, resize or re-target a sweep, or join as a worker. Here both default to 127.0.0.1;
  asking for more (another address, ``*``, ``0.0.0.0``; also through ``LOCUST_WEB_HOST`` /
  ``LOCUST_MASTER_BIND_HOST``) works and prints a warning naming the safer way (README: "Exposing
  the web UI and the master").
- **A quiet headless console.** Locust prints its stats table every ~2 s in a headless run; the
  run's own progress line and stage rows say what matters. ``--print-stats`` brings Locust's table
  back (Locust's ``--only-summary`` is what we set otherwise).
- **No spawn-rate warning.** The sweep shape chooses every spawn rate (C / stages.ramp_s); Locust's
  "spawn rate is very high (>100)" warning would blame the user for a rate they never chose. Nor,
  below ``--loglevel DEBUG``, Locust's INFO lines per stage ("Shape test updating to",
  "Ramping to", "All users spawned", a master's "Sending spawn jobs"): the stage's own ramp line
  says it.
"""

from __future__ import annotations

import logging

LOOPBACK = "127.0.0.1"
_LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
SPAWN_RATE_WARNING = "Your selected spawn rate is very high"
EXPOSE_HINT = ("put a login in front (--web-login, or a reverse proxy with authentication) or keep it on a "
               "private network; see README 'Exposing the web UI and the master'")


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


def quiet_console(options) -> None:
    """A headless run without ``--print-stats``: no periodic Locust stats table."""
    if options is not None and getattr(options, "headless", False) and not getattr(options, "print_stats", False):
        options.only_summary = True


PER_STAGE_INFO = ("Shape test updating to", "Ramping to", "All users spawned", "Sending spawn jobs")


class _RunnerNoise(logging.Filter):
    """Drops the spawn-rate warning, and the per-stage INFO lines unless ``keep_info``."""

    keep_info = False

    def filter(self, record: logging.LogRecord) -> bool:
        msg = str(record.msg)
        if msg.startswith(SPAWN_RATE_WARNING):
            return False
        return self.keep_info or record.levelno != logging.INFO or not msg.startswith(PER_STAGE_INFO)


_FILTER = _RunnerNoise()


def drop_runner_noise(options) -> None:
    """Install the filter on Locust's runner logger (module docstring); idempotent."""
    _FILTER.keep_info = str(getattr(options, "loglevel", "INFO")).upper() == "DEBUG"
    logger = logging.getLogger("locust.runners")
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
