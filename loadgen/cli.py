"""``llm-loadgen``: the installed command.

    llm-loadgen --host URL [options]        the sweep, headless (Locust underneath)
    llm-loadgen --repeat N --host URL ...   the sweep N times, intervals in repeat.json (loadgen.repeat.runner)
    llm-loadgen web [options]               the same in Locust's web UI
    llm-loadgen worker [options]            a load process of a distributed run
    llm-loadgen scenarios                   the bundled scenarios
    llm-loadgen sim [options]               the simulator (loadgen.sim.__main__)
    llm-loadgen report build|compare ...    reports (loadgen.report.__main__)
    llm-loadgen calibrate RUN... -o PRESET  fit the simulator's engine to finished runs (loadgen.whatif)
    llm-loadgen whatif PRESET [changes]     predict a sweep from that preset (loadgen.whatif)
    llm-loadgen grafana DIR                 the Grafana dashboard and Prometheus config
    llm-loadgen docs [PAGE [SECTION]]       the reference pages the package carries (loadgen.cli_docs)
    llm-loadgen demo [options]              the sweep against the built-in simulator (loadgen.demo)

Locust runs in this process: its ``main()`` with an argv of the packaged locustfile
(``loadgen/locustfile.py``) and the user's options. In-process rather than a child ``locust``
process because there is then nothing to relay: Ctrl-C and SIGTERM reach the run's own handlers,
the exit code is Locust's, ``--processes N`` forks from here as it does from ``locust``, and no
second interpreter starts. Locust parses every option, so whatever ``locust -f locustfile.py``
accepts in a clone, ``llm-loadgen`` accepts too.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from loadgen.cli_docs import docs_command
from loadgen.cli_help import format_help
from loadgen.config.bundled import GRAFANA_DIR, GRAFANA_FILES, SCENARIOS_DIR, scenario_names, scenario_summary
from loadgen.errors import EXIT_CONFIG, ConfigError
from loadgen.repeat.runner import run_repeats, split_repeat

LOCUSTFILE = Path(__file__).resolve().parent / "locustfile.py"
COMMANDS = ("web", "worker", "scenarios", "sim", "report", "calibrate", "whatif", "grafana", "docs", "demo")


def _error(message: str) -> int:
    print(f"llm-loadgen: {message}", file=sys.stderr, flush=True)
    return EXIT_CONFIG


def locust_args(args: list[str], locustfile: str = str(LOCUSTFILE)) -> list[str]:
    """Locust's arguments for an ``llm-loadgen`` command line (``worker ...``, ``web ...`` or a
    headless run's options): what the container recipes (deploy/) run through the image's entry
    point. ValueError for ``-f``: llm-loadgen runs its own locustfile."""
    if any(a in ("-f", "--locustfile") or a.startswith(("--locustfile=", "-f=")) for a in args):
        raise ValueError("-f/--locustfile: llm-loadgen runs its own locustfile; for yours, run "
                         "locust -f yours.py (and import loadgen.locustfile in it for our options)")
    command, rest = (args[0], args[1:]) if args and args[0] in ("web", "worker") else (None, args)
    mode = {"web": [], "worker": ["--worker"]}.get(command, ["--headless"])
    return ["-f", locustfile, *mode, *rest]


def run_locust(args: list[str], headless: bool) -> int:
    """Locust's main() on the packaged locustfile; it exits the process with the run's code."""
    try:
        argv = locust_args(args if headless else ["web", *args])
    except ValueError as err:
        return _error(str(err))
    sys.argv = ["llm-loadgen", *argv]
    from locust.main import main as locust_main  # gevent's monkey-patching happens here, not before

    locust_main()
    return 0


def list_scenarios() -> int:
    names = scenario_names()
    if not names:
        return _error("no bundled scenarios found in this installation (loadgen/scenarios); reinstall "
                      "llm-loadgen")
    width = max(map(len, names))
    for name in names:
        print(f"{name:<{width}}  {scenario_summary(name)}")
    print(f"\nuse one with --scenario NAME; to start your own, copy {SCENARIOS_DIR}/NAME.yaml")
    return 0


def write_grafana(args: list[str]) -> int:
    """``grafana DIR [--force]``: copy the dashboard, its provisioning, prometheus.yml and the
    compose file into DIR (existing files are kept unless --force)."""
    force = "--force" in args
    rest = [a for a in args if a != "--force"]
    if len(rest) != 1 or rest[0].startswith("-"):
        return _error("grafana: needs one folder to write into, e.g. llm-loadgen grafana ./grafana "
                      "(--force replaces files already there)")
    out = Path(rest[0])
    if out.exists() and not out.is_dir():
        return _error(f"grafana: {out} is a file, not a folder; pass a folder, e.g. ./grafana")
    existing = [name for name in GRAFANA_FILES if (out / name).exists()]
    if existing and not force:
        return _error(f"grafana: {out} already has {', '.join(existing)}; pass --force to replace them, "
                      "or another folder")
    for name in GRAFANA_FILES:
        source = GRAFANA_DIR / name
        if not source.is_file():
            return _error(f"grafana: {source} is missing from this installation; reinstall llm-loadgen")
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, out / name)
        print(f"wrote {out / name}")
    print(f"next: set the two targets in {out / 'prometheus.yml'} (llm-loadgen's --exporter-port, the "
          f"server's port), then: docker compose -f {out / 'docker-compose.yml'} up -d; "
          f"see {out / 'README.md'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:  # `llm-loadgen --help | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _main(args: list[str]) -> int:
    command = args[0] if args else None
    if command in ("sim", "report"):
        module = "loadgen.sim.__main__" if command == "sim" else "loadgen.report.__main__"
        delegate = __import__(module, fromlist=["main"]).main
        return delegate(args[1:])
    if command == "demo":
        from loadgen.demo import main as demo_main

        return demo_main(args[1:])
    if command in ("calibrate", "whatif"):  # loadgen.whatif's one parser, under this command's name
        from loadgen.whatif.__main__ import main as predict_main

        return predict_main(args, prog="llm-loadgen")
    if command is None or "-h" in args or "--help" in args:
        print(format_help(min(100, shutil.get_terminal_size((100, 20)).columns - 1)), end="")
        return 0
    if command in ("--version", "-V"):
        from importlib.metadata import version

        print(f"llm-loadgen {version('llm-loadgen')} (Locust {version('locust')})")
        return 0
    if command == "scenarios":
        return list_scenarios() if len(args) == 1 else _error("scenarios: takes no arguments")
    if command == "grafana":
        return write_grafana(args[1:])
    if command == "docs":
        return docs_command(args[1:])
    if command in ("web", "worker") and any(a.split("=", 1)[0] == "--repeat" for a in args):
        return _error(f"{command}: --repeat runs headless sweeps one after another; run llm-loadgen --repeat N "
                      "with the same options instead")
    if command == "web":
        return run_locust(args[1:], headless=False)
    if command == "worker":
        return run_locust(["--worker", *args[1:]], headless=False)
    if not command.startswith("-"):
        return _error(f"unknown command {command!r}: commands are {', '.join(COMMANDS)}, and a run "
                      "starts with an option, e.g. llm-loadgen --host http://127.0.0.1:8000 --scenario smoke "
                      "(llm-loadgen --help)")
    return run_headless(args)


def run_headless(args: list[str]) -> int:
    """The sweep; with ``--repeat N`` N sweeps and their intervals (loadgen.repeat.runner)."""
    try:
        n, rest = split_repeat(args)
    except ConfigError as err:
        return _error(str(err))
    return run_locust(args, headless=True) if n is None else run_repeats(rest, n)


if __name__ == "__main__":
    sys.exit(main())
