"""``llm-loadgen --help`` and docs/cli.md, both from the option table.

Our options come from the parser ``loadgen.config.options.register_options`` builds (the table
``_OPTIONS`` plus ``--scenario`` and ``--set``): flag, metavar and help as registered, grouped by
the scenario key each one sets, with its default read from ``DEFAULTS``. Locust's options that
matter for a sweep are listed by name; their help text is Locust's own. Nothing here repeats an
option's meaning, so the help, the docs page and the parser cannot disagree.
"""

from __future__ import annotations

import argparse
import re
import textwrap
from dataclasses import dataclass

from loadgen.config.bundled import DOCS_DIR
from loadgen.config.options import _OPTIONS, register_options
from loadgen.config.schema import DEFAULTS, StagesConfig

# Help groups in the order shown, and which scenario keys (dotted prefixes) fall in each.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("scenario", ("scenario", "set")),
    ("load and stages", ("stages.", "repeat")),
    ("workload", ("input", "output", "workload.", "prompt.", "endpoint", "model")),
    ("guard (KV cache)", ("guard.",)),
    ("replicas (several servers; docs/replicas.md)", ("replicas.",)),
    ("SLO", ("slo",)),
    ("cost and efficiency", ("cost.", "gpu_metrics")),
    ("open loop (request rates)", ("rate.",)),
    ("output", ("results_dir", "requests_jsonl", "plots", "exporter.", "run.")),
    ("TLS and authentication", ("request.", "api_key_env")),
)

# Locust's own options shown in our help (their text is Locust's), by group.
LOCUST_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("distributed (Locust)", ("--processes", "--master", "--worker", "--master-host", "--master-port",
                              "--master-bind-host", "--master-bind-port", "--expect-workers")),
    ("web UI (Locust; llm-loadgen web)", ("--web-host", "--web-port", "--autostart", "--web-login",
                                          "--web-base-path", "--tls-cert", "--tls-key")),
    ("Locust's output", ("--csv", "--html", "--json", "--print-stats", "--only-summary", "--loglevel",
                         "--logfile", "--exit-code-on-error")),
)

COMMANDS = (
    ("llm-loadgen --host URL [options]", "run the sweep headless against URL (an OpenAI-compatible server)"),
    ("llm-loadgen --host URL1 --host URL2 ... [options]", "the sweep spread over several replicas by the client "
     "(--replica-policy); one router: --host ROUTER --replica-metrics ENGINE_URL ... (docs/replicas.md)"),
    ("llm-loadgen web [options]", "the same in Locust's web UI (http://127.0.0.1:8089; press Start, or --autostart)"),
    ("llm-loadgen worker --master-host HOST [--master-port 5557]", "a load process of a distributed run"),
    ("llm-loadgen scenarios", "list the bundled scenarios (--scenario NAME)"),
    ("llm-loadgen sim [options]", "the built-in server simulator (llm-loadgen sim --help)"),
    ("llm-loadgen report build RUN_DIR | compare DIR1 DIR2 ...", "rebuild a run's report; compare runs; with two "
     "repeat folders (--repeat N) and --fail-on RULES, a regression gate (exit 6)"),
    ("llm-loadgen calibrate RUN_DIR... -o PRESET", "fit the simulator's engine to finished runs of your server: "
     "a preset, its fit (PRESET.fit.json) and fit plot (.fit.png, .fit.html); see docs/whatif.md"),
    ("llm-loadgen whatif PRESET [changes] [--out DIR]", "predict a sweep from a calibrated preset with changes "
     "(lengths, KV tokens, spec decoding, replicas, stages, SLO), every figure marked predicted "
     "(llm-loadgen whatif --help)"),
    ("llm-loadgen demo [options]", "the main job on the built-in simulator of a large server (no GPU): a "
     "sweep to C=1024, its knee, SLO maximum and KV ceiling, in about 3 minutes; options as for a run"),
    ("llm-loadgen grafana DIR", "write the Grafana dashboard, its provisioning and prometheus.yml to DIR"),
    ("llm-loadgen docs [PAGE [SECTION]]", "read a reference page the package carries: a message's \"see "
     "docs/slo.md 'Percentile limits'\" is llm-loadgen docs slo 'Percentile limits'"),
)


@dataclass(frozen=True)
class OptionDoc:
    flags: str  # "--stages STAGES"
    help: str  # the registered help, without the trailing "[dotted.key]"
    key: str | None  # the scenario key it sets (None: --scenario, --set, Locust's)
    default: str | None  # as text; None: no default worth showing


def _dotted() -> dict[str, str]:
    return {flag: dotted for flag, dotted, _, _ in _OPTIONS}


def _canonical() -> set[str]:
    """The first flag of each key; later ones are other spellings, shown without a default."""
    first: dict[str, str] = {}
    for flag, dotted, _, _ in _OPTIONS:
        first.setdefault(dotted, flag)
    return set(first.values())


def default_text(key: str | None) -> str | None:
    """The built-in default of scenario key ``key`` as text (None when unset or not a key)."""
    if key is None:
        return None
    if key == "stages.list":
        stages = DEFAULTS["stages"]
        cs = StagesConfig(**{**stages, "list": None}).concurrencies()
        return ",".join(map(str, cs[:4])) + ",...," + str(cs[-1]) + " (stages.start/factor/max)"
    node: object = DEFAULTS
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    if node is None or isinstance(node, dict):  # unset, or a section (--slo): its keys say
        return None
    if isinstance(node, bool):
        return str(node).lower()
    return str(node)


def _flags(action: argparse.Action) -> str:
    name = ", ".join(action.option_strings)
    if action.nargs == 0:
        return name
    return f"{name} {action.metavar or action.dest.upper()}"


def our_options() -> list[tuple[str, list[OptionDoc]]]:
    """(group title, its options) in GROUPS order, from the registered parser."""
    parser = argparse.ArgumentParser(add_help=False)
    register_options(parser)
    dotted, canonical = _dotted(), _canonical()
    grouped: dict[str, list[OptionDoc]] = {title: [] for title, _ in GROUPS}
    for action in parser._actions:
        flag = action.option_strings[0]
        key = dotted.get(flag)
        text = (action.help or "").replace("%%", "%")
        if key is not None and text.endswith("]"):
            text = text[: text.rindex(" [")]
        shown = flag in canonical and key != "request.verify_tls"  # --insecure: the flag's absence is the default
        doc = OptionDoc(_flags(action), text, key, default_text(key) if shown else None)
        match = key or flag[2:]
        title = next((t for t, prefixes in GROUPS if any(match.startswith(p) for p in prefixes)), None)
        if title is None:
            raise LookupError(f"{flag} sets {match}, which no help group of loadgen.cli_help.GROUPS takes")
        grouped[title].append(doc)
    return list(grouped.items())


# the sentence ending Locust's help that states Locust's own default: "Defaults to * (all interfaces)."
_LOCUST_DEFAULT = re.compile(r"\s*Defaults? to [^.]*\.?\s*$")


def locust_options() -> list[tuple[str, list[OptionDoc]]]:
    """Locust's key options with Locust's help text and llm-loadgen's defaults."""
    from locust.argument_parser import get_empty_argument_parser, setup_parser_arguments

    from loadgen.locust_face.defaults import set_loopback_defaults

    parser = get_empty_argument_parser(add_help=False, default_config_files=[])
    setup_parser_arguments(parser)
    locusts = {a.dest: a.default for a in parser._actions}
    set_loopback_defaults(parser)
    by_flag = {s: a for a in parser._actions for s in a.option_strings}
    out = []
    for title, flags in LOCUST_GROUPS:
        docs = []
        for flag in flags:
            action = by_flag[flag]
            text = " ".join((action.help or "").replace("%%", "%").split())
            if action.default != locusts[action.dest]:  # our default, not the one Locust's help states
                theirs = locusts[action.dest]
                theirs = "every interface" if theirs in ("", "*") else theirs
                text = _LOCUST_DEFAULT.sub("", text).rstrip() + (
                    f" llm-loadgen binds {action.default} unless you ask for more (Locust binds {theirs}); "
                    "see docs/distributed.md 'Exposing the web UI and the master'.")
            said = "default" in text.lower()  # Locust's help often says its default itself
            default = action.default if action.default not in (None, False, "", [], 0) and not said else None
            docs.append(OptionDoc(_flags(action), text, None, None if default is None else str(default)))
        out.append((title, docs))
    return out


def all_options() -> list[tuple[str, list[OptionDoc]]]:
    return our_options() + locust_options()


def format_help(width: int = 100) -> str:
    """The text of ``llm-loadgen --help``."""
    lines = ["usage: llm-loadgen --host URL [options]",
             "       llm-loadgen {web,worker,scenarios,sim,report,calibrate,whatif,grafana,docs} ...",
             "", "A load generator for LLM inference servers: a sweep of concurrency (or request-rate) "
             "stages, the saturation knee, an SLO search and a KV-cache guard.", "", "commands:"]
    lines += [f"  {cmd}\n      {what}" for cmd, what in COMMANDS]
    indent = " " * 6
    for title, docs in all_options():
        lines += ["", f"{title}:"]
        for d in docs:
            text = d.help + (f" (default: {d.default})" if d.default is not None else "")
            if d.key:
                text += f" [{d.key}]"
            lines.append(f"  {d.flags}")
            lines += textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent)
    lines += ["", "Each option overrides the scenario file (--scenario, default: the 'default' preset); "
              "[key] is the scenario key it sets. Every other Locust option is accepted too (locust --help). "
              "Exit codes: 0 done, 1 some requests failed, 2 bad option or scenario, 3 KV guard stop, "
              "4 server unusable, 5 internal error, 130 interrupted. Reference: {docs}."]
    lines[-1] = lines[-1].format(docs=DOCS_DIR / "cli.md")
    return "\n".join(lines[:-1] + textwrap.wrap(lines[-1], width, break_on_hyphens=False)) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def format_markdown() -> str:
    """docs/cli.md: the same options as --help, as tables (``python -m loadgen.cli_help``)."""
    out = ["# Command-line reference", "",
           "<!-- Generated by `python -m loadgen.cli_help > docs/cli.md` from the option table in",
           "loadgen/config/options.py; tests/unit/faces/test_cli.py fails when this file drifts. -->", "",
           "`llm-loadgen` runs Locust with the packaged locustfile; `locust -f locustfile.py` from a "
           "clone takes the same options. Coming from `vllm bench serve` or `sglang.bench_serving`? "
           "See [which of their options we take, and where a name means something else]"
           "(coming-from-vllm-sglang.md).", "", "## Commands", "", "| command | what |", "| --- | --- |"]
    out += [f"| `{_cell(cmd)}` | {_cell(what)} |" for cmd, what in COMMANDS]
    out += ["", "Every option below overrides the scenario file (`--scenario`, a bundled scenario's name or a YAML "
            "path; default: the bundled `default`). *Key* is the scenario key an option sets; any key can "
            "also be set with `--set KEY=VALUE`. Every other Locust option is accepted too (`locust --help`)."]
    for title, docs in all_options():
        out += ["", f"## {title[0].upper()}{title[1:]}", "", "| option | meaning | default | key |",
                "| --- | --- | --- | --- |"]
        for d in docs:
            out.append(f"| `{_cell(d.flags)}` | {_cell(d.help)} | {_cell(d.default or '')} | "
                       f"{'`' + d.key + '`' if d.key else ''} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(format_markdown(), end="")
