"""A mix of models against the simulator serving two models: the requests split by weight, per-model
rows that add up to the stage exactly, locally and over two worker processes (merged exactly), and
the start check refusing a model the server does not serve."""

from __future__ import annotations

import json
import math

import pytest

from loadgen.errors import EXIT_CONFIG
from loadgen.sim.launch import running_sim
from loadgen.stats.stage_stats import StageStats
from tests.support.runlocust import SMOKE, run_locust

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SIM = ("--preset", "fixed", "--ttft-ms", "20", "--itl-ms", "5", "--served-models", "base,lora-a")
MIX = ("--model", "base=0.7,lora-a=0.3")
SUMMED = ("requests", "error_count", "input_tokens", "output_tokens")


@pytest.fixture(scope="module")
def sim():
    with running_sim(*SIM) as s:
        yield s


def assert_rows_sum_to_stage(stage: dict) -> None:
    models = stage["models"]
    assert list(models) == ["base", "lora-a"]  # the mix's order, every model shown
    for key in SUMMED:  # exactly
        assert sum(m[key] for m in models.values()) == stage[key], key
    errors: dict = {}
    for m in models.values():
        for kind, n in m["errors"].items():
            errors[kind] = errors.get(kind, 0) + n
    assert errors == {k: n for k, n in stage["errors"].items() if n}
    # tok/s: each model's window tokens / the stage's window: the sum up to float rounding
    assert sum(m["output_tokens_per_s"] for m in models.values()) == pytest.approx(stage["output_tokens_per_s"],
                                                                                  rel=1e-9)


def assert_split_70_30(stages: list[dict]) -> None:
    """Over all stages, n(base) ~ Binomial(N, 0.7): within 4 sd = 4 sqrt(N x 0.7 x 0.3) of 0.7 N
    (N ~ 150 here: sd ~ 5.6 requests, the bound ~ 22, about 15% of N). Draws are seeded, so the
    same run gives the same counts; the bound says the draw follows the weights."""
    sent = {name: sum(s["models"][name]["requests"] + s["models"][name]["error_count"] for s in stages)
            for name in ("base", "lora-a")}
    n = sum(sent.values())
    assert n >= 50, sent
    assert abs(sent["base"] - 0.7 * n) <= 4 * math.sqrt(n * 0.7 * 0.3), sent


def test_local_mix_splits_by_weight_and_rows_sum_to_the_stage(sim, tmp_path):
    run = run_locust(sim.url, tmp_path / "r", *SMOKE, "--stages", "2,4", *MIX, "--requests-jsonl", timeout_s=120)
    assert run.code == 0, run.stderr[-3000:]
    summary = run.summary
    assert summary["run"]["model"] == "base=0.7,lora-a=0.3"
    assert summary["scenario"]["model"] == {"base": 0.7, "lora-a": 0.3}
    stages = summary["stages"]
    assert len(stages) == 2
    for stage in stages:
        assert_rows_sum_to_stage(stage)
        assert f"llm-loadgen: stage {stage['index']} models: base {stage['models']['base']['requests']} reqs" \
            in run.stderr
    assert_split_70_30(stages)
    # requests.jsonl names each request's model: per stage and model, as many lines as the row counts
    sent = [json.loads(line) for line in (run.run_dir / "requests.jsonl").read_text().splitlines()]
    for stage in stages:
        for name, row in stage["models"].items():
            n = sum(1 for r in sent if r["stage"] == stage["index"] and r["model"] == name)
            assert n == row["requests"] + row["error_count"], (stage["index"], name)
    lines = (run.run_dir / "models.csv").read_text().splitlines()
    assert lines[0].startswith("index,concurrency,offered_rate_per_s,model,requests,") and len(lines) == 1 + 4
    assert "models" not in (run.run_dir / "stages.csv").read_text().splitlines()[0].split(",")
    assert 'id="models"' in (run.run_dir / "report.html").read_text()


def test_one_model_has_no_models_rows(sim, tmp_path):
    run = run_locust(sim.url, tmp_path / "r", *SMOKE, "--stages", "2", "--model", "lora-a", timeout_s=120)
    assert run.code == 0, run.stderr[-3000:]
    assert run.summary["run"]["model"] == "lora-a" and "models" not in run.summary["stages"][0]
    assert not (run.run_dir / "models.csv").exists() and " models: " not in run.stderr


def test_start_check_refuses_a_model_the_server_does_not_serve(sim, tmp_path):
    run = run_locust(sim.url, tmp_path / "r", *SMOKE, "--stages", "2", "--model", "base=0.7,lora-b=0.3",
                     timeout_s=60)
    assert run.code == EXIT_CONFIG, run.stderr[-3000:]
    assert "does not serve the model 'lora-b' of the mix (GET /v1/models lists 'base', 'lora-a')" in run.stderr


def test_two_processes_merge_per_model_rows_exactly(sim, tmp_path):
    results = tmp_path / "r"
    run = run_locust(sim.url, results, *SMOKE, "--stages", "2,4", *MIX, "--processes", "2", timeout_s=180)
    assert run.code == 0, run.stderr[-3000:]
    summary = run.summary
    assert summary["run"]["workers"] == 2
    ledgers = [json.loads(p.read_text()) for p in sorted((results / "workers").glob("*.json"))]
    assert len(ledgers) == 2
    for stage in summary["stages"]:
        assert_rows_sum_to_stage(stage)
        k = stage["index"]
        for name, row in stage["models"].items():
            # the master's row for (stage, model) is that of the workers' shipped StageStats merged
            parts = [StageStats.from_message(by_name[name]) for ledger in ledgers
                     for stage_k, by_name in ledger.get("models", []) if stage_k == k and name in by_name]
            merged = StageStats()
            for part in parts:
                merged.merge(part)
            assert merged.model_row(stage["window_s"]) == row, (k, name)
        # both workers sent requests of the stage
        assert sum(1 for ledger in ledgers if any(sk == k for sk, _ in ledger.get("models", []))) == 2
    assert_split_70_30(summary["stages"])


def test_open_loop_mix_rows_sum_to_the_stage(sim, tmp_path):
    run = run_locust(sim.url, tmp_path / "r", "--scenario", "config/smoke.yaml", "--output-tokens", "20",
                     "--rates", "40", "--warmup", "1", "--stage-duration", "4", *MIX, timeout_s=120)
    assert run.code == 0, run.stderr[-3000:]
    (stage,) = run.summary["stages"]
    assert stage["offered_rate_per_s"] == 40
    assert_rows_sum_to_stage(stage)
    assert_split_70_30([stage])
