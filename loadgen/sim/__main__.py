"""``python -m loadgen.sim``: run the LLM server simulator.

    python -m loadgen.sim --preset qwen35-397b-8gpu --time-scale 10 --port 0

The first stdout line is ``SIM_LISTENING http://127.0.0.1:PORT`` (``--port 0`` picks a free port;
``https://`` with ``--tls-cert``),
so a test or demo can start it and read where it listens. Every ``SimConfig`` field has an option
(``--kv-tokens``, ``--ttft-ms``, ...; lists comma-separated) and every fault kind one too
(``--fault-http-500 0.01``). A bad option or preset value exits 2 with one line on stderr naming it.
SIGTERM or SIGINT stop it with exit 0. No monkey-patching: the server uses gevent sockets directly.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

import gevent
from gevent.event import Event

from loadgen.sim import config as simconfig
from loadgen.sim.faults import FAULT_KINDS, FAULT_MEANINGS
from loadgen.sim.server import SimServer
from loadgen.sim.tls import TLSFilesError, server_context

EXIT_CONFIG = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like every other config error
        print(f"llmsim: {message} (see --help)", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG)


def build_parser() -> argparse.ArgumentParser:
    """Every option with its meaning, unit and default (a setting's: ``config.HELP``, a fault's:
    ``faults.FAULT_MEANINGS``)."""
    ap = _Parser(prog="python -m loadgen.sim", description="Built-in LLM server simulator.",
                 epilog="Defaults are those without --preset; a preset sets its own values and an option "
                        "overrides both. ms and us are simulated time (wall time = simulated / --time-scale).")
    names = ", ".join(simconfig.preset_names())
    ap.add_argument("--preset", help=f"preset name ({names}) or a YAML path; --list-presets describes them "
                    "(default: none, the defaults below)")
    ap.add_argument("--list-presets", action="store_true", help="print each preset with its first comment line")
    ap.add_argument("--host", default="127.0.0.1", help="listen address (default: %(default)s)")
    ap.add_argument("--port", default="8000", help="listen port; 0 picks a free one (default: %(default)s)")
    ap.add_argument("--tls-cert", metavar="PEM", help="serve https:// with this certificate (chain) file "
                    "(default: none, plain http://)")
    ap.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert (default: in the "
                    "--tls-cert file)")
    ap.add_argument("--log-level", default="WARNING", help="log level of stderr lines: DEBUG, INFO, WARNING, "
                    "ERROR (default: %(default)s)")
    for name in simconfig.FIELDS:
        if name != "faults":
            ap.add_argument("--" + name.replace("_", "-"), dest="set_" + name, metavar="VALUE",
                            help=f"{simconfig.HELP[name]} (default: {simconfig.default_text(name)})"
                            .replace("%", "%%"))
    for kind in FAULT_KINDS:
        ap.add_argument("--fault-" + kind.replace("_", "-"), dest="fault_" + kind, metavar="RATE",
                        help=f"per-request probability (0-1) of {FAULT_MEANINGS[kind]} (default: 0)")
    return ap


def config_from_args(args: argparse.Namespace) -> simconfig.SimConfig:
    """Preset, then options; raises SimConfigError naming the option."""
    overrides = {k[4:]: v for k, v in vars(args).items() if k.startswith("set_") and v is not None}
    faults = {k[6:]: v for k, v in vars(args).items() if k.startswith("fault_") and v is not None}
    cfg = simconfig.load(args.preset, overrides)
    for kind, rate in faults.items():
        simconfig.set_fault(cfg, kind, rate)
    return simconfig.validate(cfg)


def _option_name(key: str, args: argparse.Namespace) -> str:
    """Name a bad setting the way the user gave it: ``--kv-tokens`` if it came from an option."""
    if key == "preset":
        return "--preset"
    if key.startswith("faults."):
        if getattr(args, "fault_" + key[7:], None) is not None:
            return "--fault-" + key[7:].replace("_", "-")
    elif getattr(args, "set_" + key, None) is not None:
        return "--" + key.replace("_", "-")
    return f"{key} (preset {args.preset})" if args.preset else key


def tls_context(args: argparse.Namespace):
    """The server-side TLS context of --tls-cert/--tls-key, None without them; TLSFilesError."""
    if args.tls_key and not args.tls_cert:
        raise TLSFilesError("--tls-key: needs --tls-cert (the certificate the key belongs to)")
    return server_context(args.tls_cert, args.tls_key) if args.tls_cert else None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list_presets:
        for name in simconfig.preset_names():
            print(f"{name:<22} {simconfig.preset_summary(name)}")
        return 0
    try:
        cfg = config_from_args(args)
        port = int(args.port)
        if not 0 <= port <= 65535:
            raise ValueError
    except simconfig.SimConfigError as exc:
        print(f"llmsim: {_option_name(exc.key, args)}{str(exc)[len(exc.key):]}", file=sys.stderr)
        return EXIT_CONFIG
    except ValueError:
        print(f"llmsim: --port: must be an integer in 0..65535, got {args.port!r}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        tls = tls_context(args)
    except TLSFilesError as exc:
        print(f"llmsim: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s llmsim %(levelname)s %(message)s")
    server = SimServer(cfg)
    try:
        bound = server.start(args.host, port, tls)
    except OSError as exc:
        print(f"llmsim: cannot listen on {args.host}:{port}: {exc}", file=sys.stderr)
        return 1
    print(f"SIM_LISTENING {'https' if tls else 'http'}://{args.host}:{bound}", flush=True)
    print(f"llmsim: timing={cfg.timing} flavor={cfg.flavor} model={cfg.model} "
          f"kv_tokens={cfg.kv_tokens} time_scale={cfg.time_scale}", file=sys.stderr, flush=True)
    stop = Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        gevent.signal_handler(sig, stop.set)
    stop.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
