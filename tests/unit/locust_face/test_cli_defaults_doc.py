"""docs/cli.md states the defaults a run really binds.

cli.md is generated from the option table (tests/unit/faces/test_cli.py keeps it so), but the generator reads
its defaults from the schema, and Locust's help text states Locust's own defaults. This file checks
the page against what a run gets: Locust's parser with our plugin's listener (the one
``llm-loadgen`` parses with), and the default scenario file a run loads without ``--scenario``.
A default that the page states and the run does not bind (``--web-host`` documented as ``*``
while it binds 127.0.0.1) fails here."""

from __future__ import annotations

import re
import sys

import pytest
import yaml
from locust.argument_parser import get_parser

import loadgen.locust_face.plugin  # noqa: F401  (registers our options and defaults on Locust's parser)
from loadgen.config.files import default_scenario_path
from tests.unit.faces.test_cli import ROOT

ROW = re.compile(r"^\| `(--[a-z-]+)[^`]*` \| (.*) \| (.*) \| (.*) \|$")
STATED = re.compile(r"Defaults? (?:to|is) (\S+)")  # Locust's help: "Defaults to 5557.", "Default is INFO."


def cli_rows() -> dict[str, tuple[str, str, str]]:
    """{flag: (meaning, default cell, key cell)} of docs/cli.md's option tables."""
    rows = {}
    for line in (ROOT / "docs" / "cli.md").read_text(encoding="utf-8").splitlines():
        m = ROW.match(line)
        if m:
            rows[m[1]] = (m[2], m[3].strip(), m[4].strip().strip("`"))
    return rows


@pytest.fixture
def bound(monkeypatch):
    """flag -> the value the run's parser binds when the option is not given."""
    for name in ("LOCUST_WEB_HOST", "LOCUST_MASTER_BIND_HOST", "LOCUST_PROCESSES"):
        monkeypatch.delenv(name, raising=False)
    parser = get_parser(default_config_files=[])
    opts = parser.parse_args(["-f", "locustfile.py"])
    return {flag: getattr(opts, a.dest) for a in parser._actions for flag in a.option_strings
            if hasattr(opts, a.dest)}


def scenario_default(key: str):
    node = yaml.safe_load(default_scenario_path().read_text(encoding="utf-8"))
    for part in key.split("."):
        node = node[part]
    return node


def as_cell(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def test_the_loopback_binds_are_documented_as_bound(bound):
    rows = cli_rows()
    for flag in ("--web-host", "--master-bind-host"):
        meaning, default, _ = rows[flag]
        assert bound[flag] == "127.0.0.1"
        assert default == "127.0.0.1", (flag, default)
        assert "Defaults to" not in meaning and "'*'" not in meaning, (flag, meaning)


def test_every_default_locust_states_is_the_one_bound(bound):
    checked = 0
    for flag, (meaning, default, key) in cli_rows().items():
        if key or flag not in bound:
            continue
        if default:
            assert as_cell(bound[flag]) == default, (flag, default, bound[flag])
            checked += 1
        stated = STATED.search(meaning)
        if stated:
            said = stated[1].rstrip(".").strip("'")
            assert ("" if said == "empty" else said) == as_cell(bound[flag]), (flag, meaning, bound[flag])
            checked += 1
    assert checked >= 8


def test_every_scenario_key_default_is_the_default_scenarios(bound):
    checked = 0
    for flag, (_, default, key) in cli_rows().items():
        if not key or not default:
            continue
        # not given, the option binds nothing (None, or False for a switch) and the scenario's value holds
        assert bound[flag] in (None, False), f"{flag} binds {bound[flag]!r} over the scenario's value"
        if key == "stages.list":  # the geometric sweep: 1,2,4,8,...,1024
            stages = scenario_default("stages")
            assert stages["list"] is None
            assert default.startswith(f"{stages['start']},{stages['start'] * stages['factor']},")
            assert f",...,{stages['max']} " in default
        else:
            assert as_cell(scenario_default(key)) == default, (flag, key, default)
        checked += 1
    assert checked >= 30


def test_a_wrong_default_in_the_page_is_caught(bound, monkeypatch):
    rows = cli_rows()
    wrong = {**rows, "--web-host": ("Host. Defaults to '*'", "", "")}
    monkeypatch.setattr(sys.modules[__name__], "cli_rows", lambda: wrong)
    with pytest.raises(AssertionError):
        test_the_loopback_binds_are_documented_as_bound(bound)
    with pytest.raises(AssertionError):
        test_every_default_locust_states_is_the_one_bound(bound)
