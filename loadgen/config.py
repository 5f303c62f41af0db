"""Scenario config: YAML file + dotted overrides + command-line options -> a frozen Scenario.

Public API (other modules code against exactly this):
    load_scenario(path, overrides) -> Scenario   path None: the repo's config/default.yaml
    register_options(parser)                     adds our options to Locust's parser
    scenario_from_options(parsed_options)        file + CLI options (CLI wins) -> Scenario
    exit_on_config_error(err)                    one stderr line, exit code 2
    Scenario, its section dataclasses, DEFAULTS, build_scenario (a parsed document -> Scenario)

A scenario file may name any subset of the keys; the rest take the built-in defaults (DEFAULTS,
equal to config/default.yaml). Every problem is a ConfigError naming the dotted key, the value and
the fix. The types live in config_schema, the field checks in config_fields, the assembly in
config_build; this module does the file and option I/O.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import yaml

from loadgen.config_build import build_scenario
from loadgen.config_fields import Shown
from loadgen.config_schema import (
    DEFAULTS,
    ENDPOINTS,
    GUARD_ACTIONS,
    ClientCheckConfig,
    ExporterConfig,
    FrozenDict,
    GuardConfig,
    KneeConfig,
    PromptConfig,
    RequestConfig,
    Scenario,
    StagesConfig,
)
from loadgen.errors import EXIT_CONFIG, ConfigError

__all__ = [
    "DEFAULTS",
    "ENDPOINTS",
    "GUARD_ACTIONS",
    "ClientCheckConfig",
    "ExporterConfig",
    "FrozenDict",
    "GuardConfig",
    "KneeConfig",
    "PromptConfig",
    "RequestConfig",
    "Scenario",
    "StagesConfig",
    "build_scenario",
    "default_scenario_path",
    "exit_on_config_error",
    "load_scenario",
    "read_scenario_file",
    "register_options",
    "scenario_from_options",
]

_ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = _ROOT / "config"


def default_scenario_path() -> Path | None:
    """config/default.yaml of the repository checkout, or None in an installed package (the
    pyproject.toml check keeps a stray site-packages/config/ from being picked up)."""
    path = CONFIG_DIR / "default.yaml"
    return path if path.is_file() and (_ROOT / "pyproject.toml").is_file() else None


def load_scenario(
    path: str | os.PathLike[str] | None = None, overrides: dict[str, Any] | None = None
) -> Scenario:
    """Read and validate a scenario. ``overrides`` uses dotted keys and wins over the file, e.g.
    ``{"input_tokens": 500, "stages.list": [1, 4], "guard.action": "clamp"}``."""
    if path is None:
        default = default_scenario_path()
        doc: Any = read_scenario_file(default) if default else DEFAULTS
    else:
        doc = read_scenario_file(path)
    return build_scenario(doc, overrides)


class _DuplicateKey(Exception):
    def __init__(self, key: Any, first_line: int, line: int):
        super().__init__(key)
        self.key, self.first_line, self.line = key, first_line, line


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (YAML would keep the last one)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` may be overridden, by design
            continue
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line
        try:
            if key in seen:
                raise _DuplicateKey(key, seen[key] + 1, line + 1)
            seen[key] = line
        except TypeError:  # an unhashable key: construct_mapping reports it
            continue
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _bundled_hint(path: Path) -> str:
    candidates = [CONFIG_DIR / path.name, CONFIG_DIR / f"{path.name}.yaml"]
    for c in candidates:
        if c.is_file():
            return f"did you mean {c}?"
    return (
        "pass an existing YAML file to --scenario; bundled ones are in config/ (default, chat, smoke, soak)"
    )


def read_scenario_file(path: str | os.PathLike[str]) -> Any:
    """The parsed YAML document of a scenario file; ConfigError if unreadable, invalid or empty."""
    p = Path(path)
    key = "scenario"
    try:
        source = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(key, str(p), "file not found", _bundled_hint(p)) from None
    except IsADirectoryError:
        raise ConfigError(
            key, str(p), "is a directory, not a file", f"pass a file, e.g. {p / 'default.yaml'}"
        ) from None
    except PermissionError:
        raise ConfigError(
            key, str(p), "cannot be read: permission denied", "make it readable (chmod u+r)"
        ) from None
    except UnicodeDecodeError as e:
        raise ConfigError(key, str(p), f"is not UTF-8 text (byte {e.start})", "save it as UTF-8") from None
    except OSError as e:
        raise ConfigError(
            key, str(p), f"cannot be read: {e.strerror}", "check the path and its permissions"
        ) from None
    try:
        doc = yaml.load(source, Loader=_StrictLoader)  # a SafeLoader subclass: no object tags
    except _DuplicateKey as e:
        raise ConfigError(
            f"{p}:{e.line}",
            e.key,
            f"key given twice (first on line {e.first_line})",
            "remove one of them; YAML would silently keep the last",
        ) from None
    except yaml.YAMLError as e:
        raise _yaml_error(p, source, e) from None
    if doc is None:
        raise ConfigError(
            key, str(p), "file has no settings (empty or only comments)", "start from config/default.yaml"
        ) from None
    return doc


def _yaml_error(path: Path, source: str, err: yaml.YAMLError) -> ConfigError:
    """Name the file and line, show the line, and say where an unclosed construct started."""
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    problem = " ".join(str(getattr(err, "problem", None) or err).split())
    if mark is None:
        return ConfigError(str(path), Shown("(no position)"), f"invalid YAML: {problem}", "fix the syntax")
    lines = source.splitlines()
    context, context_mark = getattr(err, "context", None), getattr(err, "context_mark", None)
    if context and context_mark is not None and context_mark is not mark:
        problem += f" ({context} at line {context_mark.line + 1})"
    text = lines[mark.line].strip() if mark.line < len(lines) else ""
    shown: Any = text[:80] if text else Shown("(end of file)" if mark.line >= len(lines) else "(blank line)")
    fix = f"fix the syntax at line {mark.line + 1}, column {mark.column + 1}"
    if "\\t" in problem or "\t" in text:
        fix += "; indent with spaces, not tabs"
    return ConfigError(f"{path}:{mark.line + 1}", shown, f"invalid YAML: {problem}", fix)


def exit_on_config_error(err: ConfigError) -> NoReturn:
    """Print ``llm-loadgen: config error: <message>`` as one stderr line and exit with code 2."""
    message = " ".join(str(err).split())
    print(f"llm-loadgen: config error: {message}", file=sys.stderr, flush=True)
    sys.exit(EXIT_CONFIG)


# --- command-line options -------------------------------------------------------------------
# (flag, dotted key, type, help). A type that is a tuple means choices; bool means a flag.
# Defaults are None ("not given": the file wins); values arrive as text and are converted here,
# so a bad value gets the same one-line ConfigError as a bad file value, not an argparse usage dump.
_OPTIONS: tuple[tuple[str, str, Any, str], ...] = (
    ("--input-tokens", "input_tokens", int, "prompt length in tokens"),
    ("--output-tokens", "output_tokens", int, "tokens generated per request"),
    ("--endpoint", "endpoint", ENDPOINTS, "API to load: /v1/completions or /v1/chat/completions"),
    ("--model", "model", str, "model id (default: the first id from GET /v1/models)"),
    ("--api-key-env", "api_key_env", str, "NAME of the env var holding the API key (not the key)"),
    ("--results-dir", "results_dir", str, "directory for summary.json and stages.csv"),
    ("--stages", "stages.list", "stages", "stage concurrencies, e.g. 1,4,16 (strictly increasing)"),
    ("--stage-duration", "stages.duration_s", float, "measured seconds per stage"),
    ("--warmup", "stages.warmup_s", float, "seconds per stage excluded from statistics"),
    ("--ramp", "stages.ramp_s", float, "seconds to start each stage's users"),
    ("--min-requests", "stages.min_requests", int, "extend each window until this many requests finished"),
    ("--shared-prefix-tokens", "prompt.shared_prefix_tokens", int, "leading tokens shared by all prompts"),
    (
        "--kv-capacity-tokens",
        "guard.kv_capacity_tokens",
        int,
        "KV cache size in tokens (default: ask the server)",
    ),
    ("--guard-margin", "guard.margin", float, "projected tokens *= (1 + margin)"),
    ("--guard-action", "guard.action", GUARD_ACTIONS, "what to do with a stage over KV capacity"),
    ("--require-guard", "guard.require", bool, "fail if the KV capacity is unknown"),
    ("--exporter-port", "exporter.port", int, "Prometheus exporter port (0: off)"),
    ("--exporter-host", "exporter.host", str, "Prometheus exporter bind address"),
)


def _dest(flag: str) -> str:
    return flag[2:].replace("-", "_")


def register_options(parser: Any) -> None:
    """Add the scenario options to Locust's parser (``events.init_command_line_parser``) or any
    argparse parser. They are kept out of Locust's web UI form; values land in
    ``environment.parsed_options`` under the flag's name (``--input-tokens`` -> ``input_tokens``)."""
    group = parser.add_argument_group("llm-loadgen scenario", "Each option overrides the scenario file.")

    def add(*args: Any, **kwargs: Any) -> None:
        # Locust shows an option in its web UI only if the action's include_in_web_ui is true; an
        # argument group's add_argument does not accept the kwarg, so set the attribute directly.
        group.add_argument(*args, **kwargs).include_in_web_ui = False

    add("--scenario", default=None, metavar="PATH", help="scenario YAML file (default: config/default.yaml)")
    for flag, dotted, kind, text in _OPTIONS:
        if kind is bool:
            add(flag, action="store_true", default=False, help=f"{text} [{dotted}]")
        elif isinstance(kind, tuple):
            # no argparse `choices`: a bad value gets our one-line error naming the fix
            add(flag, default=None, metavar="{" + ",".join(kind) + "}", help=f"{text} [{dotted}]")
        else:
            add(flag, default=None, metavar=_dest(flag).upper(), help=f"{text} [{dotted}]")
    add(
        "--set",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="set any scenario key, e.g. --set request.extra_body.temperature=0 (VALUE is YAML; repeatable)",
    )


def _parse_set(item: str) -> tuple[str, Any]:
    key, eq, text = str(item).partition("=")
    if not eq or not key.strip():
        raise ConfigError("--set", item, "must be KEY=VALUE", "e.g. --set stages.list=[1,4]")
    try:
        return key.strip(), yaml.safe_load(text)
    except yaml.YAMLError:
        raise ConfigError(
            f"{key.strip()} (from --set)",
            text,
            "is not a valid YAML value",
            "quote text values, e.g. --set model='\"my-model\"'",
        ) from None


def _convert(flag: str, dotted: str, kind: Any, raw: Any) -> Any:
    """Text from the command line -> a typed value. Text that does not convert is passed on
    unchanged so the field's own check reports it (with its fix)."""
    if not isinstance(raw, str):
        return raw  # already typed (e.g. options relayed by the Locust master)
    if kind is int or kind is float:
        try:
            return kind(raw.strip())
        except ValueError:
            return raw
    if kind == "stages":
        values = []
        for part in raw.split(","):
            try:
                values.append(int(part.strip()))
            except ValueError:
                raise ConfigError(
                    f"{dotted} (from {flag})",
                    raw,
                    f"must be comma-separated whole numbers; {part.strip()!r} is not one",
                    "e.g. --stages 1,4,16",
                ) from None
        return values
    return raw


def scenario_from_options(parsed_options: Any) -> Scenario:
    """The scenario file named by --scenario (default config/default.yaml) with every given option
    laid over it: --set first, then the named options. A ConfigError about a value that came from
    the command line names the flag, e.g. ``stages.list (from --stages): ...``."""
    overrides: dict[str, Any] = {}
    origin = {"scenario": "--scenario"}
    for item in getattr(parsed_options, "set", None) or []:
        key, value = _parse_set(item)
        overrides[key] = value
        origin[key] = "--set"
    for flag, dotted, kind, _ in _OPTIONS:
        raw = getattr(parsed_options, _dest(flag), None)
        if raw is None or raw is False:
            continue
        overrides[dotted] = _convert(flag, dotted, kind, raw)
        origin[dotted] = flag
    try:
        return load_scenario(getattr(parsed_options, "scenario", None), overrides)
    except ConfigError as e:
        where = origin.get(e.key.partition("[")[0])
        if where is None:
            raise
        raise ConfigError(f"{e.key} (from {where})", e.value, e.problem, e.fix) from None
