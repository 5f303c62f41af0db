"""Scenario config: defaults, bundled files, derived stages, overrides, CLI options, validation."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from loadgen import config
from loadgen.config import (
    DEFAULTS,
    FrozenDict,
    Scenario,
    build_scenario,
    exit_on_config_error,
    load_scenario,
    register_options,
    scenario_from_options,
)
from loadgen.config.build import SPEC
from loadgen.config.schema import SECTIONS
from loadgen.errors import EXIT_CONFIG, ConfigError

REPO = Path(__file__).resolve().parents[3]
CONFIG = REPO / "config"


def _assert_same_typed(a, b, path="") -> None:
    """Equal and of the same types all the way down (0.1 vs 0.10 is fine, 60 vs 60.0 is not)."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _assert_same_typed(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same_typed(x, y, f"{path}[{i}]")
    else:
        assert a == b, path


def _leaves(d: dict, prefix: str = "") -> set[str]:
    out = set()
    for k, v in d.items():
        path = f"{prefix}{k}"
        if k in SECTIONS and not prefix:
            out |= _leaves(v, path + ".")
        else:
            out.add(path)
    return out


# --- defaults and bundled files -----------------------------------------------------------------


def test_default_yaml_equals_builtin_defaults():
    _assert_same_typed(yaml.safe_load((CONFIG / "default.yaml").read_text()), DEFAULTS)


def test_schema_covers_exactly_the_default_keys():
    assert set(SPEC) == _leaves(DEFAULTS)
    for name, cls in SECTIONS.items():  # a "flatten" field is a family of keys (slo.ttft_p99_s), no leaf
        assert [f.name for f in dataclasses.fields(cls) if not f.metadata.get("flatten")] == list(DEFAULTS[name])
    # a "part_of" field is held by another key (model_mix: a mix given as model)
    assert [f.name for f in dataclasses.fields(Scenario) if not f.metadata.get("part_of")] == list(DEFAULTS)


def test_load_none_reads_repo_default_and_falls_back_to_builtin(monkeypatch):
    from_repo = load_scenario(None)
    assert config.default_scenario_path() == CONFIG / "default.yaml"
    monkeypatch.setattr(config.files, "default_scenario_path", lambda: None)  # as in an installed package
    assert load_scenario(None) == from_repo == build_scenario(DEFAULTS)


def test_default_scenario_is_the_seeds_sweep():
    s = load_scenario(None)
    assert (s.name, s.endpoint, s.model, s.api_key_env) == (
        "default",
        "completions",
        None,
        "OPENAI_API_KEY",
    )
    assert (s.input_tokens, s.output_tokens) == (1000, 1000)
    assert s.concurrencies() == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    assert s.prompt.token_id_range == (1000, 30000)
    assert s.request.continuous_usage is True and dict(s.request.extra_body) == {}
    assert (s.guard.kv_capacity_tokens, s.guard.action, s.guard.require) == (None, "abort", False)
    assert s.knee.threshold == pytest.approx(0.1) and s.exporter.port == 0
    assert isinstance(s.stages.duration_s, float) and isinstance(s.stages.max, int)


def test_bundled_scenarios():
    chat = load_scenario(CONFIG / "chat.yaml")
    assert chat.endpoint == "chat" and chat.concurrencies()[-1] == 1024
    smoke = load_scenario(str(CONFIG / "smoke.yaml"))
    assert (smoke.input_tokens, smoke.output_tokens, smoke.concurrencies()) == (64, 32, [1, 2])
    assert smoke.stages.warmup_s + smoke.stages.duration_s <= 10 and smoke.stages.drain_s <= 30
    soak = load_scenario(CONFIG / "soak.yaml")
    assert len(soak.concurrencies()) == 1 and soak.stages.duration_s >= 3600
    demo = load_scenario(CONFIG / "demo.yaml")
    assert (demo.input_tokens, demo.output_tokens, demo.concurrencies()[-1]) == (1000, 1000, 1024)
    for path in CONFIG.glob("*.yaml"):  # every bundled scenario is valid
        load_scenario(path)


# --- derived stages -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "stages, expected",
    [
        ({"start": 1, "factor": 2, "max": 16}, [1, 2, 4, 8, 16]),
        ({"start": 1, "factor": 3, "max": 10}, [1, 3, 9, 10]),  # max appended when skipped
        ({"start": 3, "factor": 2, "max": 20}, [3, 6, 12, 20]),
        ({"start": 5, "factor": 2, "max": 5}, [5]),
        ({"start": 1, "factor": 1.5, "max": 6}, [1, 2, 3, 5, 6]),  # 1.5->2, 2.25->2 dropped, 3.375->3
        ({"start": 4, "factor": 10, "max": 1000}, [4, 40, 400, 1000]),
        ({"list": [1, 4, 16, 32], "start": 1, "factor": 2, "max": 1024}, [1, 4, 16, 32]),
    ],
)
def test_concurrencies(stages, expected):
    assert build_scenario({"stages": stages}).concurrencies() == expected


def test_concurrencies_are_strictly_increasing_from_start_to_max():
    for start, factor, top in [(1, 1.1, 50), (2, 1.7, 333), (7, 2, 1024), (1, 4, 4096)]:
        c = build_scenario({"stages": {"start": start, "factor": factor, "max": top}}).concurrencies()
        assert c[0] == start and c[-1] == top
        assert all(b > a for a, b in zip(c, c[1:], strict=False))


# --- overrides, partial files, frozen values ----------------------------------------------------


def test_partial_file_takes_defaults_and_overrides_win(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("input_tokens: 200\nstages:\n  list: [1, 2]\nguard:\n  action: warn\n")
    s = load_scenario(f, {"input_tokens": 500, "stages.list": [1, 4], "guard.action": "clamp"})
    assert (s.input_tokens, s.concurrencies(), s.guard.action) == (500, [1, 4], "clamp")
    assert s.output_tokens == 1000 and s.stages.duration_s == 60 and s.guard.watch is True
    assert load_scenario(f).guard.action == "warn"


def test_overrides_reach_extra_body_and_whole_sections():
    s = build_scenario(
        {"request": {"extra_body": {"temperature": 1}}},
        {
            "request.extra_body.temperature": 0,
            "request.extra_body.sampling.top_k": 5,
            "knee": {"threshold": 0.2},
        },
    )
    assert dict(s.request.extra_body) == {"temperature": 0, "sampling": {"top_k": 5}}
    assert s.knee.threshold == 0.2


def test_scenario_is_frozen_and_copyable():
    s = build_scenario({"request": {"extra_body": {"temperature": 0}}})
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.input_tokens = 5  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.stages.max = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        s.request.extra_body["temperature"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        s.request.extra_body.update(top_p=1)
    assert {**s.request.extra_body, "x": 1} == {"temperature": 0, "x": 1}
    assert copy.deepcopy(s) == s and pickle.loads(pickle.dumps(s)) == s
    assert isinstance(copy.deepcopy(s).request.extra_body, FrozenDict)


def test_file_values_are_not_shared_with_the_scenario():
    doc = {"request": {"extra_body": {"stop": ["x"]}}}
    s = build_scenario(doc)
    doc["request"]["extra_body"]["stop"].append("y")
    assert s.request.extra_body["stop"] == ["x"]
    assert DEFAULTS["stages"]["list"] is None and DEFAULTS["request"]["extra_body"] == {}


def test_to_dict_is_json_safe_and_round_trips():
    s = build_scenario({"stages": {"list": [1, 8]}, "request": {"extra_body": {"temperature": 0}}})
    d = s.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["stages"]["list"] == [1, 8] and d["prompt"]["token_id_range"] == [1000, 30000]
    assert d["api_key_env"] == "OPENAI_API_KEY"
    assert build_scenario(d) == s
    assert set(d) == set(DEFAULTS)


# --- validation: one bad input each -------------------------------------------------------------

# (document or overrides, key in message, value text in message)
BAD_DOCUMENTS = [
    ({"stages": {"factor": 0.5}}, "stages.factor", "0.5"),
    ({"stages": {"factor": 1}}, "stages.factor", "1"),
    ({"stages": {"factor": 1.0001}}, "stages.factor", "1.0001"),
    ({"input_tokens": True}, "input_tokens", "True"),
    ({"input_tokens": "1e3"}, "input_tokens", "'1e3'"),
    ({"input_tokens": "1000"}, "input_tokens", "'1000'"),
    ({"output_tokens": 32.5}, "output_tokens", "32.5"),
    ({"input_tokens": 0}, "input_tokens", "0"),
    ({"output_tokens": -1}, "output_tokens", "-1"),
    ({"input_tokens": None}, "input_tokens", "None"),
    ({"stages": {"duraton_s": 3}}, "stages.duraton_s", "3"),
    ({"duration_s": 3}, "duration_s", "3"),
    ({"stages": [1, 2, 4]}, "stages", "[1, 2, 4]"),
    ({"prompt": 5}, "prompt", "5"),
    ({"stages": {"list": [4, 1]}}, "stages.list", "[4, 1]"),
    ({"stages": {"list": [1, 4, 4]}}, "stages.list", "[1, 4, 4]"),
    ({"stages": {"list": []}}, "stages.list", "[]"),
    ({"stages": {"list": [1, 0]}}, "stages.list[1]", "0"),
    ({"stages": {"list": [1, True]}}, "stages.list[1]", "True"),
    ({"stages": {"list": "1,4"}}, "stages.list", "'1,4'"),
    ({"stages": {"start": 8, "max": 4}}, "stages.max", "4"),
    ({"stages": {"start": 0}}, "stages.start", "0"),
    ({"stages": {"duration_s": 0}}, "stages.duration_s", "0"),
    ({"stages": {"duration_s": "60s"}}, "stages.duration_s", "'60s'"),
    ({"stages": {"warmup_s": -5}}, "stages.warmup_s", "-5"),
    ({"stages": {"min_requests": 10, "duration_s": 1000}}, "stages.max_window_s", "900"),
    ({"endpoint": "chats"}, "endpoint", "'chats'"),
    ({"endpoint": "responses"}, "endpoint", "'responses'"),
    ({"prompt": {"token_id_range": [5, 5]}}, "prompt.token_id_range", "[5, 5]"),
    ({"prompt": {"token_id_range": [-1, 5]}}, "prompt.token_id_range", "[-1, 5]"),
    ({"prompt": {"token_id_range": [1000]}}, "prompt.token_id_range", "[1000]"),
    ({"prompt": {"shared_prefix_tokens": 1000}}, "prompt.shared_prefix_tokens", "1000"),
    ({"prompt": {"seed": -3}}, "prompt.seed", "-3"),
    ({"guard": {"margin": -0.1}}, "guard.margin", "-0.1"),
    ({"guard": {"action": "stop"}}, "guard.action", "'stop'"),
    ({"guard": {"kv_capacity_tokens": 0}}, "guard.kv_capacity_tokens", "0"),
    ({"guard": {"require": "yes"}}, "guard.require", "'yes'"),
    ({"guard": {"watch": 1}}, "guard.watch", "1"),
    ({"request": {"read_timeout_s": float("nan")}}, "request.read_timeout_s", "nan"),
    ({"request": {"connect_timeout_s": float("inf")}}, "request.connect_timeout_s", "inf"),
    ({"request": {"extra_body": {"max_tokens": 5}}}, "request.extra_body.max_tokens", "5"),
    ({"request": {"extra_body": {"stream": False}}}, "request.extra_body.stream", "False"),
    ({"request": {"extra_body": [1]}}, "request.extra_body", "[1]"),
    ({"request": {"extra_body": {7: 1}}}, "request.extra_body", "7"),
    ({"knee": {"threshold": 1.5}}, "knee.threshold", "1.5"),
    ({"knee": {"treshold": 0.2}}, "knee.treshold", "0.2"),
    ({"exporter": {"port": 70000}}, "exporter.port", "70000"),
    ({"exporter": {"host": ""}}, "exporter.host", "''"),
    ({"client_check": {"cpu_percent_max": 0}}, "client_check.cpu_percent_max", "0"),
    ({"model": 7}, "model", "7"),
    ({"name": "a/b"}, "name", "'a/b'"),
    ({"results_dir": None}, "results_dir", "None"),
    ({"stuff": 1}, "stuff", "1"),
    ({"slo": {"ttft_s": 0.0005}}, "slo.ttft_s", "0.0005"),  # below 1 ms
    ({"slo": {"ttft_s": 0}}, "slo.ttft_s", "0"),
    ({"slo": {"tpot_s": -0.05}}, "slo.tpot_s", "-0.05"),
    ({"slo": {"e2e_s": "60s"}}, "slo.e2e_s", "'60s'"),
    ({"slo": {"attainment": 0}}, "slo.attainment", "0"),
    ({"slo": {"attainment": 1.5}}, "slo.attainment", "1.5"),
    ({"slo": {"attainment": 99}}, "slo.attainment", "99"),
    ({"slo": {"ttft": 2}}, "slo.ttft", "2"),  # an unknown objective name
    ({"slo": {"p99_ttft_s": 2}}, "slo.p99_ttft_s", "2"),
    ({"slo": {"search": True}}, "slo.search", "True"),  # nothing to search for
    ({"slo": {"tpot_s": 0.05, "resolution": 0}}, "slo.resolution", "0"),
    ({"slo": {"tpot_s": 0.05, "max_search_stages": 0}}, "slo.max_search_stages", "0"),
    ({"slo": {"early_stop": True}}, "slo.early_stop", "True"),  # nothing to decide
    ({"slo": {"tpot_s": 0.05, "confidence": 1}}, "slo.confidence", "1"),
    ({"slo": {"tpot_s": 0.05, "confidence": 0.5}}, "slo.confidence", "0.5"),
    ({"slo": {"tpot_s": 0.05, "confidence": 95}}, "slo.confidence", "95"),
    ({"slo": 0.99}, "slo", "0.99"),
]


@pytest.mark.parametrize("doc, key, value", BAD_DOCUMENTS, ids=[b[1] + ":" + b[2] for b in BAD_DOCUMENTS])
def test_bad_value_names_key_value_and_fix(doc, key, value):
    with pytest.raises(ConfigError) as info:
        build_scenario(doc)
    err = info.value
    message = str(err)
    assert message.startswith(f"{key}: "), message
    assert f"got {value}" in message, message
    assert err.fix and "\n" not in message


@pytest.mark.parametrize(
    "overrides, key, value",
    [
        ({"stages.factor": 0.5}, "stages.factor", "0.5"),
        ({"stages.duration": 5}, "stages.duration", "5"),
        ({"guard.action": "Clamp"}, "guard.action", "'Clamp'"),
        ({"input_tokens": 10, "prompt.shared_prefix_tokens": 10}, "prompt.shared_prefix_tokens", "10"),
        ({"exporter": {"prot": 9000}}, "exporter.prot", "9000"),
    ],
)
def test_bad_override_names_key_and_value(overrides, key, value):
    with pytest.raises(ConfigError, match=rf"^{key}: .*got {value}"):
        build_scenario({}, overrides)


def test_did_you_mean_suggestions():
    cases = {
        "stages.duraton_s": "did you mean stages.duration_s?",
        "duration_s": "did you mean stages.duration_s?",  # right key, wrong section
        "guard.marjin": "did you mean guard.margin?",
        "input_token": "did you mean input_tokens?",
    }
    for dotted, suggestion in cases.items():
        with pytest.raises(ConfigError) as info:
            build_scenario({}, {dotted: 1})
        assert info.value.fix == suggestion
    with pytest.raises(ConfigError) as info:
        build_scenario({"endpoint": "chats"})
    assert "did you mean 'chat'?" in info.value.fix
    with pytest.raises(ConfigError) as info:
        build_scenario({"stages": [1, 2, 4]})
    assert info.value.fix == "did you mean stages.list: [1, 2, 4]?"


@pytest.mark.parametrize(("given", "meant", "a_path"), [
    ("/v1/chat/completions", "chat", True),  # the path the API streams from, not its name
    ("/v1/completions", "completions", True),
    ("http://gpu-box:8000/v1/chat/completions/", "chat", True),  # the whole URL
    ("/completions", "completions", True),
    ("chat-completions", "chat", False),
    ("completion", "completions", False),
])
def test_an_endpoint_given_as_its_path_or_url_suggests_the_api_that_path_belongs_to(given, meant, a_path):
    with pytest.raises(ConfigError) as info:
        build_scenario({}, {"endpoint": given})
    e = info.value
    assert e.key == "endpoint" and e.value == given
    assert e.fix.startswith(f"did you mean {meant!r}?") and "chat for /v1/chat/completions" in e.fix
    assert ("not its path" in e.problem) is a_path


def test_number_written_as_text_gets_plain_digits_fix():
    with pytest.raises(ConfigError) as info:
        build_scenario(yaml.safe_load("input_tokens: 1e3"))  # YAML 1.1: a string, not a float
    assert "write 1000 as plain digits" in info.value.fix
    with pytest.raises(ConfigError) as info:
        build_scenario({"stages": {"list": [4, 1, 4]}})
    assert info.value.fix == "write [1, 4]"


def test_secret_in_api_key_env_is_never_echoed():
    secret = "sk-live-0123456789abcdef"
    with pytest.raises(ConfigError) as info:
        build_scenario({"api_key_env": secret})
    assert str(info.value).startswith("api_key_env: ")
    assert secret not in str(info.value) and "sk-" not in str(info.value)
    assert "OPENAI_API_KEY" in info.value.fix
    assert build_scenario({"api_key_env": None}).api_key_env is None


# --- files --------------------------------------------------------------------------------------


def _file_error(path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    assert "\n" not in str(info.value) and info.value.fix
    return info.value


def test_missing_file_and_directory(tmp_path):
    missing = tmp_path / "nope.yaml"
    err = _file_error(missing)
    assert str(err).startswith("scenario: file not found") and str(missing) in str(err)
    err = _file_error(tmp_path)
    assert "is a directory" in str(err) and str(tmp_path) in str(err)
    assert load_scenario("smoke") == load_scenario(CONFIG / "smoke.yaml")  # a preset by name
    assert load_scenario("smoke.yaml") == load_scenario(CONFIG / "smoke.yaml")
    err = _file_error(tmp_path / "smoke.yaml")  # a preset's file name in another folder
    assert err.fix == "did you mean --scenario smoke (the bundled scenario)?"


def test_unreadable_file(tmp_path, monkeypatch):
    f = tmp_path / "locked.yaml"
    f.write_text("name: x\n")

    def deny(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_text", deny)  # root ignores file modes, so simulate the OS
    err = _file_error(f)
    assert "permission denied" in str(err) and str(f) in str(err)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root can read any file")
def test_unreadable_file_for_real(tmp_path):
    f = tmp_path / "locked.yaml"
    f.write_text("name: x\n")
    f.chmod(0)
    assert "permission denied" in str(_file_error(f))


@pytest.mark.parametrize(
    "text, key, value",
    [
        ("name: x\nstages:\n  list: [1, 2\n", ":4", "(end of file)"),  # unclosed flow list
        ("name: x\nstages:\n\tduration_s: 3\n", ":3", "'duration_s: 3'"),  # tab indent
        ("name: x\nendpoint: chat: 1\n", ":2", "'endpoint: chat: 1'"),
        ("name: x\nstages:\n  duration_s: 3\n  duration_s: 4\n", ":4", "'duration_s'"),  # duplicate
        ("a: 1\n---\nb: 2\n", ":2", "'---'"),  # two documents
    ],
)
def test_invalid_yaml_names_file_and_line(tmp_path, text, key, value):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    err = _file_error(f)
    assert str(err).startswith(f"{f}{key}: "), str(err)
    assert f"got {value}" in str(err)


def test_tab_and_duplicate_fixes(tmp_path):
    f = tmp_path / "tab.yaml"
    f.write_text("stages:\n\tduration_s: 3\n")
    assert "spaces, not tabs" in _file_error(f).fix
    f.write_text("stages: {list: [1], list: [2]}\n")
    assert "given twice" in str(_file_error(f))
    f.write_text("base: &b {start: 1, max: 8}\nstages:\n  <<: *b\n  start: 2\n")
    assert config.read_scenario_file(f)["stages"] == {"start": 2, "max": 8}  # a merge key is no duplicate


@pytest.mark.parametrize(
    "content, expected",
    [
        (b"", "file has no settings"),
        (b"# only a comment\n\n", "file has no settings"),
        (b"- 1\n- 2\n", "top level must be a mapping"),
        (b"hello\n", "top level must be a mapping"),
        (b"name: \xff\xfe\n", "not UTF-8"),
    ],
)
def test_empty_or_wrong_shape_file(tmp_path, content, expected):
    f = tmp_path / "s.yaml"
    f.write_bytes(content)
    err = _file_error(f)
    assert str(err).startswith("scenario: ") and expected in str(err)


# --- command-line options -----------------------------------------------------------------------


def _parse(args: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register_options(parser)
    return parser.parse_args(args)


def test_option_defaults_mean_not_given():
    ns = _parse([])
    given = {k: v for k, v in vars(ns).items() if v not in (None, False)}
    assert given == {}
    assert scenario_from_options(ns) == load_scenario(None)


def test_cli_overrides_win_over_the_file(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("input_tokens: 200\noutput_tokens: 20\nstages:\n  list: [1, 2]\n  warmup_s: 3\n")
    ns = _parse(
        [
            "--scenario",
            str(f),
            "--input-tokens",
            "300",
            "--endpoint",
            "chat",
            "--model",
            "m",
            "--results-dir",
            "out",
            "--stages",
            "1, 4,16",
            "--stage-duration",
            "7.5",
            "--warmup",
            "0",
            "--kv-capacity-tokens",
            "100000",
            "--guard-action",
            "clamp",
            "--require-guard",
            "--exporter-port",
            "9400",
            "--exporter-host",
            "0.0.0.0",
            "--api-key-env",
            "VLLM_KEY",
            "--set",
            "request.extra_body.temperature=0",
            "--set",
            "knee.threshold=0.2",
        ]
    )
    s = scenario_from_options(ns)
    assert (s.input_tokens, s.output_tokens, s.endpoint, s.model) == (300, 20, "chat", "m")
    assert (s.results_dir, s.concurrencies(), s.stages.duration_s, s.stages.warmup_s) == (
        "out",
        [1, 4, 16],
        7.5,
        0,
    )
    assert (s.guard.kv_capacity_tokens, s.guard.action, s.guard.require) == (100000, "clamp", True)
    assert (s.exporter.port, s.exporter.host, s.api_key_env) == (9400, "0.0.0.0", "VLLM_KEY")
    assert dict(s.request.extra_body) == {"temperature": 0} and s.knee.threshold == 0.2
    assert scenario_from_options(_parse(["--scenario", str(f)])).guard.require is False  # flag absent


def test_no_plots_turns_the_plots_off_and_they_are_on_by_default(tmp_path):
    assert scenario_from_options(_parse([])).plots is True
    assert scenario_from_options(_parse(["--no-plots"])).plots is False
    f = tmp_path / "s.yaml"
    f.write_text("plots: false\n")
    assert scenario_from_options(_parse(["--scenario", str(f)])).plots is False


def test_slo_block_from_file_set_and_the_short_cli_form(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("slo:\n  ttft_s: 2\n  attainment: 0.9\n")
    s = scenario_from_options(_parse(["--scenario", str(f), "--slo", "tpot_s=0.05,e2e_s=30", "--slo-search",
                                      "--set", "slo.max_search_stages=6"]))
    assert s.slo.thresholds == {"ttft_s": 2.0, "tpot_s": 0.05, "e2e_s": 30.0}
    assert (s.slo.attainment, s.slo.search, s.slo.max_search_stages, s.slo.resolution) == (0.9, True, 6, 0.1)
    assert s.slo.enabled and not build_scenario({}).slo.enabled  # the default: no objective, no accounting
    assert build_scenario(s.to_dict()) == s


def test_slo_early_stop_from_the_flag_and_the_confidence_from_slo():
    s = scenario_from_options(_parse(["--slo", "tpot_s=0.05,confidence=0.9", "--slo-early-stop"]))
    assert (s.slo.early_stop, s.slo.confidence) == (True, 0.9)
    assert (build_scenario({}).slo.early_stop, build_scenario({}).slo.confidence) == (False, 0.95)
    assert build_scenario(s.to_dict()) == s


def test_named_option_wins_over_set():
    s = scenario_from_options(_parse(["--set", "input_tokens=5", "--input-tokens", "6"]))
    assert s.input_tokens == 6


@pytest.mark.parametrize(
    "args, key, value",
    [
        (["--stages", "1,x"], "stages.list (from --stages)", "'1,x'"),
        (["--stages", "1,,4"], "stages.list (from --stages)", "'1,,4'"),
        (["--stages", "4,1"], "stages.list (from --stages)", "[4, 1]"),
        (["--stages", "0,1"], "stages.list[0] (from --stages)", "0"),
        (["--input-tokens", "abc"], "input_tokens (from --input-tokens)", "'abc'"),
        (["--input-tokens", "1e3"], "input_tokens (from --input-tokens)", "'1e3'"),
        (["--stage-duration", "-1"], "stages.duration_s (from --stage-duration)", "-1"),
        (["--exporter-port", "99999"], "exporter.port (from --exporter-port)", "99999"),
        (["--api-key-env", "my key"], "api_key_env (from --api-key-env)", "<hidden: 6 characters>"),
        (["--scenario", "/nonexistent/x.yaml"], "scenario (from --scenario)", "'/nonexistent/x.yaml'"),
        (["--set", "stages.factor=0.5"], "stages.factor (from --set)", "0.5"),
        (["--set", "stages.facter=3"], "stages.facter (from --set)", "3"),
        (["--set", "nokey"], "--set", "'nokey'"),
        (["--set", "stages.list=[1,"], "stages.list (from --set)", "'[1,'"),
        (["--slo", "ttft_s=0.0001"], "slo.ttft_s (from --slo)", "0.0001"),
        (["--slo", "ttft=2"], "slo.ttft (from --slo)", "2"),
        (["--slo", "ttft_s"], "slo (from --slo)", "'ttft_s'"),
        (["--slo", "tpot_s=0.05,attainment=2"], "slo.attainment (from --slo)", "2"),
        (["--slo-search"], "slo.search (from --slo-search)", "True"),
        (["--set", "slo.attainment=0"], "slo.attainment (from --set)", "0"),
    ],
)
def test_bad_cli_values_name_the_option(args, key, value):
    with pytest.raises(ConfigError) as info:
        scenario_from_options(_parse(args))
    message = str(info.value)
    assert message.startswith(f"{key}: ") and f"got {value}" in message, message


@pytest.mark.parametrize("args, fix", [
    (["--slo", "ttft=2"], "did you mean --slo ttft_s=2?"),  # the flag's own NAME=VALUE form
    (["--slo", "tpot_s=0.05,attain=0.9"], "did you mean --slo attainment=0.9?"),
    (["--slo", "duration_s=5"], "did you mean --set stages.duration_s=5?"),  # not a key of --slo's section
    (["--set", "slo.ttft=2"], "did you mean --set slo.ttft_s=2?"),
    (["--set", "stages.facter= 3"], "did you mean --set stages.factor=3?"),
])
def test_did_you_mean_is_spelled_the_way_the_user_wrote_it(args, fix):
    with pytest.raises(ConfigError) as info:
        scenario_from_options(_parse(args))
    assert info.value.fix == fix


def test_did_you_mean_in_a_file_is_the_scenario_key(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("slo:\n  ttft: 2\n")
    with pytest.raises(ConfigError) as info:
        scenario_from_options(_parse(["--scenario", str(f)]))
    assert str(info.value) == "slo.ttft: unknown key, got 2 (did you mean slo.ttft_s?)"


def test_choice_options_get_our_one_line_error_not_argparse_usage():
    with pytest.raises(ConfigError) as info:
        scenario_from_options(_parse(["--guard-action", "stop"]))
    assert str(info.value).startswith("guard.action (from --guard-action)") and "'stop'" in str(info.value)


def test_typed_values_relayed_by_a_master_are_accepted():
    ns = argparse.Namespace(
        scenario=None, input_tokens=300, stages=[1, 2], stage_duration=5.0, require_guard=True
    )
    s = scenario_from_options(ns)  # missing attributes count as not given
    assert (s.input_tokens, s.concurrencies(), s.stages.duration_s, s.guard.require) == (
        300,
        [1, 2],
        5.0,
        True,
    )


_LOCUST_PARSER_SCRIPT = """
import json
from locust.argument_parser import get_empty_argument_parser, setup_parser_arguments
from loadgen.config import register_options, scenario_from_options
parser = get_empty_argument_parser()
setup_parser_arguments(parser)
register_options(parser)
ns = parser.parse_args(["-f", "x.py", "--headless", "--input-tokens", "64", "--stages", "1,2", "--require-guard"])
ours = [a.dest for a in parser._actions if a.dest in ("scenario", "input_tokens", "stages", "require_guard", "set")]
print(json.dumps({
    "ours": ours,
    "in_web_ui": sorted(set(ours) & set(parser.args_included_in_web_ui)),
    "headless": ns.headless,
    "scenario": scenario_from_options(ns).to_dict(),
}))
"""


def test_options_work_in_locusts_parser_and_stay_out_of_its_web_ui():
    # A subprocess: importing locust monkey-patches the interpreter with gevent.
    out = subprocess.run(
        [sys.executable, "-c", _LOCUST_PARSER_SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(result["ours"]) == 5 and result["in_web_ui"] == [] and result["headless"] is True
    assert result["scenario"]["input_tokens"] == 64 and result["scenario"]["stages"]["list"] == [1, 2]
    assert result["scenario"]["guard"]["require"] is True


# --- exit ---------------------------------------------------------------------------------------


def test_exit_on_config_error_prints_one_line(capsys):
    with pytest.raises(SystemExit) as info:
        exit_on_config_error(ConfigError("stages.factor", 0.5, "must be > 1\nreally", "use 2"))
    assert info.value.code == EXIT_CONFIG == 2
    err = capsys.readouterr().err
    assert err == "llm-loadgen: config error: stages.factor: must be > 1 really, got 0.5 (use 2)\n"


def test_bad_file_exits_2_with_one_stderr_line_and_no_traceback(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("stages:\n  factor: 0.5\n")
    script = (
        "import sys\n"
        "from loadgen.config import load_scenario, exit_on_config_error\n"
        "from loadgen.errors import ConfigError\n"
        "try:\n    load_scenario(sys.argv[1])\n"
        "except ConfigError as e:\n    exit_on_config_error(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(f)], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.splitlines()
    assert lines == [
        "llm-loadgen: config error: stages.factor: must be > 1, got 0.5 (use 2 to double concurrency each stage)"
    ]
    assert "Traceback" not in out.stderr


def test_a_missing_scenario_lists_every_bundled_file(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_scenario(tmp_path / "nosuch.yaml")
    bundled = sorted(p.stem for p in CONFIG.glob("*.yaml"))
    assert "demo" in bundled and f"({', '.join(bundled)})" in str(err.value)
