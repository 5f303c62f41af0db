"""Simulator settings: presets, option overrides, one-line errors with exit code 2."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from loadgen.sim.__main__ import build_parser, config_from_args
from loadgen.sim.config import SimConfigError, load
from loadgen.sim.launch import running_sim
from loadgen.sim.probe import request


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
