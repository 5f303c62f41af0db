"""Scenario files: the repository default, strict YAML reading (duplicate keys refused, errors
with line and column), and the one-line exit on a ConfigError."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import yaml

from loadgen.config.build import build_scenario
from loadgen.config.bundled import resolve_scenario, scenario_names
from loadgen.config.fields import Shown
from loadgen.config.schema import DEFAULTS, Scenario
from loadgen.errors import EXIT_CONFIG, ConfigError

_ROOT = Path(__file__).resolve().parents[2]  # the checkout: loadgen/config/files.py -> ../../..
CONFIG_DIR = _ROOT / "config"


def default_scenario_path() -> Path | None:
    """config/default.yaml of the repository checkout, or None in an installed package (the
    pyproject.toml check keeps a stray site-packages/config/ from being picked up)."""
    path = CONFIG_DIR / "default.yaml"
    return path if path.is_file() and (_ROOT / "pyproject.toml").is_file() else None


def load_scenario(
    path: str | os.PathLike[str] | None = None, overrides: dict[str, Any] | None = None
) -> Scenario:
    """Read and validate a scenario: ``path`` is a file or a bundled scenario's name (``smoke``,
    loadgen.config.bundled). ``overrides`` uses dotted keys and wins over the file, e.g.
    ``{"input_tokens": 500, "stages.list": [1, 4], "guard.action": "clamp"}``."""
    if path is None:
        default = default_scenario_path()
        doc: Any = read_scenario_file(default) if default else DEFAULTS
    else:
        doc = read_scenario_file(resolve_scenario(path))
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
    stem = path.name[:-5] if path.name.endswith(".yaml") else path.name
    if stem in scenario_names():
        return f"did you mean --scenario {stem} (the bundled scenario)?"
    return f"pass an existing YAML file to --scenario, or a bundled scenario's name ({', '.join(scenario_names())})"


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
    for line in getattr(err, "problems", ())[1:]:  # a dataset's further bad lines, one each
        print(f"llm-loadgen: config error: {line}", file=sys.stderr, flush=True)
    sys.exit(EXIT_CONFIG)
