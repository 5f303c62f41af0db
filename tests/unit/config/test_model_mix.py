"""A mix of models (loadgen.workload.model_mix): parsing, bad input, the seeded weighted draw."""

from __future__ import annotations

import math

import pytest

from loadgen.config import ConfigError
from loadgen.config.build import build_scenario
from loadgen.workload.model_mix import ModelDraw, ModelMix, parse_model


def test_one_name_stays_one_name():
    assert parse_model("model", "Qwen/Qwen2.5-0.5B") == "Qwen/Qwen2.5-0.5B"
    assert parse_model("model", None) is None
    sc = build_scenario({"model": "m"})
    assert sc.model == "m" and sc.model_mix is None and sc.to_dict()["model"] == "m"


@pytest.mark.parametrize("value", ["a=0.7,b=0.3", " a = 0.7 , b = 0.3 ", {"a": 0.7, "b": 0.3}, {"a": 7, "b": 3}])
def test_mix_forms(value):
    mix = parse_model("model", value)
    assert mix.names == ("a", "b")
    assert mix.shares == pytest.approx((0.7, 0.3))


def test_scenario_round_trip_and_first_name():
    sc = build_scenario({}, {"model": "base=0.7,lora-1=0.3"})
    assert sc.model == "base"  # the probe's model
    assert sc.model_mix == ModelMix(("base", "lora-1"), (0.7, 0.3))
    assert sc.to_dict()["model"] == {"base": 0.7, "lora-1": 0.3}
    assert build_scenario(sc.to_dict()) == sc


@pytest.mark.parametrize(("value", "says", "fix"), [
    ("a=0,b=1", "the weight of 'a' must be a number > 0", "weight > 0"),
    ("a=-1,b=1", "must be a number > 0", "weight > 0"),
    ({"a": 0.5, "b": -0.5}, "the weight of 'b' must be a number > 0", "weight > 0"),
    ({"a": True}, "the weight of 'a' must be a number", "weight > 0"),
    ("a=x,b=1", "the weight of 'a' must be a number", "weight > 0"),
    ("a=inf,b=1", "must be a number > 0", "weight > 0"),
    ("a=0.5,a=0.5", "names the model 'a' twice", "give each model once"),
    ("a=0.7,b", "the model 'b' has no weight", "e.g. b=0.3"),
    ("a,b", "the model 'a' has no weight", "e.g. a=0.3"),
    ("a=0.7,b=", "the model 'b' has no weight", "e.g. b=0.3"),
    ("a=0.7,,b=0.3", "has an empty model name", "name=weight"),
    ({}, "is an empty mix", "name at least one model"),
    ("", "must not be empty", "GET /v1/models"),
    (3, "must be a model name or a mix", "model:"),
])
def test_bad_mix_is_a_config_error_naming_value_and_fix(value, says, fix):
    with pytest.raises(ConfigError) as err:
        build_scenario({"model": value})
    text = str(err.value)
    assert text.startswith("model: ") and says in text and fix in text
    assert repr(value) in text  # the value as given


def test_draw_matches_weights_within_sampling_error():
    mix = parse_model("model", "a=0.7,b=0.3")
    n = 20_000
    draw = ModelDraw(mix, (0, 0, 0))
    count_a = sum(draw.next() == "a" for _ in range(n))
    sd = math.sqrt(n * 0.7 * 0.3)  # binomial sd, about 65
    assert abs(count_a - 0.7 * n) < 4 * sd


def test_draw_three_models_and_tiny_weight():
    mix = parse_model("model", {"x": 1, "y": 2, "z": 1e-9})
    draw = ModelDraw(mix, (1, 2, 3))
    got = [draw.next() for _ in range(8000)]
    n_y = got.count("y")
    assert abs(n_y - 8000 * 2 / 3) < 4 * math.sqrt(8000 * 2 / 9)
    assert set(got) <= {"x", "y", "z"} and got.count("z") <= 1


def test_draw_is_seeded_per_sender():
    mix = parse_model("model", "a=0.5,b=0.5")
    first = [ModelDraw(mix, (0, 0, 1)).next() for _ in range(1)]
    one = ModelDraw(mix, (0, 0, 1))
    same = ModelDraw(mix, (0, 0, 1))
    other = ModelDraw(mix, (0, 1, 1))
    seq = [one.next() for _ in range(64)]
    assert seq == [same.next() for _ in range(64)]
    assert seq[:1] == first
    assert seq != [other.next() for _ in range(64)]


def test_start_check_names_a_model_the_server_does_not_list():
    from loadgen.server.replies import parse_models, unserved_models

    info = parse_models({"data": [{"id": "base"}, {"id": "lora-1", "parent": "base"}, {"nope": 1}]})
    assert info.model == "base" and info.ids == ("base", "lora-1")
    assert unserved_models(("base", "lora-1"), info) is None
    line = unserved_models(("base", "lora-2", "x"), info)
    assert "'lora-2', 'x'" in line and "lists 'base', 'lora-1'" in line and "--model" in line
    assert parse_models({"data": "bad"}).ids == ()


def test_the_what_if_predicts_a_mix_per_model_and_says_how(tmp_path):
    import json

    from loadgen import cli

    path = tmp_path / "mix.yaml"
    path.write_text("model: {a: 0.7, b: 0.3}\nstages: {list: [1], warmup_s: 1, duration_s: 2, ramp_s: 1}\n")
    out = tmp_path / "out"
    assert cli.main(["whatif", "llama8b-1gpu-vllm", "--scenario", str(path), "--out", str(out), "--no-plots"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scenario"]["model"] == {"a": 0.7, "b": 0.3}
    assert any(n.startswith("the mix of models is drawn per request") for n in summary["notes"])
    assert all(set(stage["models"]) == {"a", "b"} for stage in summary["stages"])


def test_models_console_line_and_csv():
    from loadgen.report.models import models_csv_text, models_line

    fig = {"requests": 7, "error_count": 2, "errors": {"http_5xx": 2}, "input_tokens": 700, "output_tokens": 140,
           "output_tokens_per_s": 35.0, "ttft_p50_s": 0.021, "ttft_p99_s": 0.0254, "itl_p50_s": 0.005,
           "itl_p99_s": 0.008, "e2e_p50_s": 0.12, "e2e_p99_s": 0.13}
    row = {"index": 1, "concurrency": 4, "models": {"a": fig, "b": {**fig, "error_count": 0, "errors": {}}}}
    assert models_line(row) == ("llm-loadgen: stage 1 models: a 7 reqs, 2 errors 35.0 tok/s TTFT p50/p99 21/25 ms "
                                "E2E p50 0.12 s; b 7 reqs 35.0 tok/s TTFT p50/p99 21/25 ms E2E p50 0.12 s")
    assert models_line({"index": 0}) is None
    lines = models_csv_text([row, {"index": 2}]).splitlines()
    assert len(lines) == 3 and lines[1].startswith("1,4,,a,7,2,700,140,35.0,")
