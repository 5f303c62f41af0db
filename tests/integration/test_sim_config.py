"""Simulator settings: presets, option overrides, one-line errors with exit code 2."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from loadgen.sim.__main__ import build_parser, config_from_args
from loadgen.sim.config import SimConfigError, load
from loadgen.sim.launch import running_sim
from tests.support.raw_client import request


def cli_config(*argv: str):
    return config_from_args(build_parser().parse_args(list(argv)))


def test_presets_load_with_the_seeds_server_facts():
    fixed = load("fixed")
    assert (fixed.timing, fixed.ttft_ms, fixed.itl_ms, fixed.tokens_per_chunk) == ("fixed", 200, 20, 1)
    qwen = load("qwen35-397b-8gpu")
    assert (qwen.timing, qwen.flavor, qwen.kv_tokens) == ("engine", "sglang", 1_570_000)
    assert len(qwen.spec_accept) > 1  # NEXTN speculative decoding


def test_options_override_preset_fields():
    cfg = cli_config("--preset", "qwen35-397b-8gpu", "--time-scale", "10", "--flavor", "vllm",
                     "--kv-tokens", "500000", "--seed", "4", "--spec-accept", "0.5,0.5",
                     "--fault-http-429", "0.1")
    assert (cfg.time_scale, cfg.flavor, cfg.kv_tokens, cfg.seed) == (10.0, "vllm", 500_000, 4)
    assert cfg.spec_accept == [0.5, 0.5] and cfg.faults == {"http_429": 0.1}
    assert cfg.step_base_ms == load("qwen35-397b-8gpu").step_base_ms  # untouched keys kept


@pytest.mark.parametrize("yaml_text, fragment", [
    ("kv_tokenz: 5\n", "kv_tokenz: unknown simulator setting"),
    ("kv_tokens: lots\n", "kv_tokens: must be an integer, got 'lots'"),
    ("time_scale: 0\n", "time_scale: must be > 0"),
    ("flavor: tgi\n", "flavor: must be one of vllm|sglang"),
    ("spec_accept: [0.5, 0.2]\n", "spec_accept: must be probabilities >= 0 summing to 1"),
    ("faults: {http_500: 0.6, reset: 0.6}\n", "faults: rates must sum to <= 1"),
    ("faults: {oom: 0.1}\n", "faults.oom: unknown fault kind"),
    ("timing: engine\nkv_tokens: 1000\nmax_model_len: 4096\n", "max_model_len: must leave room"),
    ("- just a list\n", "must be a YAML mapping"),
    ("step_batch_ms: [[2, 12], [1, 6]]\n", "step_batch_ms: needs batches > 0 in ascending order"),
    ("step_batch_ms: [1, 6]\n", "step_batch_ms: must be a list of batch:ms pairs"),
])
def test_bad_preset_values_name_key_and_value(tmp_path, yaml_text, fragment):
    path = tmp_path / "p.yaml"
    path.write_text(yaml_text)
    with pytest.raises(SimConfigError) as info:
        load(str(path))
    assert fragment in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("argv, fragment", [
    (["--kv-tokens", "abc"], "--kv-tokens: must be an integer, got 'abc'"),
    (["--fault-reset", "2"], "--fault-reset: must be a probability in [0, 1]"),
    (["--preset", "nope"], "--preset: no such preset or file"),
    (["--port", "x"], "--port: must be an integer"),
    (["--no-such-option"], "unrecognized arguments: --no-such-option"),
])
def test_cli_bad_option_exits_2_with_one_line(argv, fragment):
    proc = subprocess.run([sys.executable, "-m", "loadgen.sim", *argv], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], proc.stderr
    assert proc.stdout == ""


@pytest.mark.integration
def test_step_batch_knots_from_yaml_or_an_option_reach_the_engine(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("timing: engine\nstep_batch_ms: [[1, 6.1], [2, 12.2], [4, 14.3]]\n")
    knots = load(str(path)).engine_params().step_batch_s
    assert [b for b, _ in knots] == [1, 2, 4] and [s for _, s in knots] == pytest.approx([0.0061, 0.0122, 0.0143])
    assert load(str(path), {"step_batch_ms": "1:5,3:9"}).step_batch_ms == [[1, 5], [3, 9]]
    assert load(str(path), {"step_batch_ms": "none"}).engine_params().step_batch_s == ()
    with pytest.raises(SimConfigError, match="step_batch_ms: needs batches > 0 in ascending order"):
        load(str(path), {"step_batch_ms": "1:5,1:9"})


def test_listening_line_and_clean_sigterm():
    with running_sim("--preset", "fixed") as sim:
        url, proc = sim.url, sim.proc
        assert url.startswith("http://127.0.0.1:") and int(url.rsplit(":", 1)[1]) > 0
        assert request(url, "GET", "/health").status == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


def test_list_presets_names_each_with_what_it_models(capsys):
    from loadgen.sim.__main__ import main
    from loadgen.sim.config import preset_names

    assert main(["--list-presets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == preset_names()
    assert {"fixed", "qwen35-397b-8gpu", "slo-linear"} <= set(preset_names())
    assert all(len(line.split(maxsplit=1)) == 2 for line in lines)  # a description on every line


def _help_entries(text: str) -> dict[str, str]:
    """``--help`` output parsed: {option: its help text, wrapped lines joined}."""
    section = text[text.index("options:"):].splitlines()[1:]
    entries: dict[str, str] = {}
    current = None
    for line in section:
        if line.startswith("  -"):  # "  --ttft-ms VALUE       help..." or the option alone on its line
            invocation, _, rest = line.strip().partition("  ")
            current = invocation.split()[0].rstrip(",")
            entries[current] = rest.strip()
        elif line.startswith(" " * 10) and current is not None:
            entries[current] = (entries[current] + " " + line.strip()).strip()
        else:
            current = None  # the epilog
    return entries


UNIT_WORDS = {"_ms": " ms", "_us": " us", "_s": "seconds", "_tokens": "tokens"}


def test_every_simulator_option_has_its_meaning_unit_and_default_in_help(monkeypatch):
    from loadgen.sim.config import FIELDS, default_text
    from loadgen.sim.faults import FAULT_KINDS

    monkeypatch.setenv("COLUMNS", "100")  # a terminal's width: long options and help texts wrap
    parser = build_parser()
    entries = _help_entries(parser.format_help())
    options = {s for a in parser._actions for s in a.option_strings if s.startswith("--")} - {"--help"}
    assert set(entries) == options | {"-h"}
    # + preset, list-presets, host, port, tls-cert, tls-key, log-level
    assert len(options) == len(FIELDS) - 1 + len(FAULT_KINDS) + 7
    for option in options - {"--list-presets"}:
        assert "(default: " in entries[option], (option, entries[option])
        assert len(entries[option]) > len("(default: x)") + 10, (option, entries[option])  # a meaning too
    for name in FIELDS.keys() - {"faults"}:
        text = entries["--" + name.replace("_", "-")]
        assert text.endswith(f"(default: {default_text(name)})"), text
        unit = next((word for suffix, word in UNIT_WORDS.items() if name.endswith(suffix)), None)
        assert unit is None or unit in text, (name, text)
    assert entries["--ttft-ms"] == "fixed: time to first token, ms (default: 200.0)"
    assert entries["--spec-accept"].endswith("(default: 1.0)") and entries["--reject-fields"].endswith("(default: none)")
    for kind in FAULT_KINDS:
        assert entries["--fault-" + kind.replace("_", "-")].startswith("per-request probability (0-1) of ")
