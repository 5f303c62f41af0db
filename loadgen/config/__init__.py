"""Scenario config: YAML file + dotted overrides + command-line options -> a frozen Scenario.

Public API (other modules code against exactly this):
    load_scenario(path, overrides) -> Scenario   path None: the repo's config/default.yaml
    register_options(parser)                     adds our options to Locust's parser
    scenario_from_options(parsed_options)        file + CLI options (CLI wins) -> Scenario
    exit_on_config_error(err)                    one stderr line, exit code 2
    Scenario, its section dataclasses, DEFAULTS, build_scenario (a parsed document -> Scenario)

A scenario file may name any subset of the keys; the rest take the built-in defaults (DEFAULTS,
equal to config/default.yaml). Every problem is a ConfigError naming the dotted key, the value and
the fix. Modules: ``schema`` (the types and defaults), ``fields`` (field checks), ``build`` (a
document -> Scenario), ``files`` (YAML reading), ``options`` (the command line). This facade
re-exports the public names, so ``from loadgen.config import X`` is the way in.
"""

from loadgen.config.build import build_scenario
from loadgen.config.fields import Shown
from loadgen.config.files import (
    default_scenario_path,
    exit_on_config_error,
    load_scenario,
    read_scenario_file,
)
from loadgen.config.options import register_options, scenario_from_options
from loadgen.config.schema import (
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
from loadgen.errors import ConfigError  # imported from here by callers since before the package

__all__ = [
    "DEFAULTS",
    "ENDPOINTS",
    "GUARD_ACTIONS",
    "ClientCheckConfig",
    "ConfigError",
    "ExporterConfig",
    "FrozenDict",
    "GuardConfig",
    "KneeConfig",
    "PromptConfig",
    "RequestConfig",
    "Shown",
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
