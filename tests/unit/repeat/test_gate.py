"""loadgen.repeat.summary and loadgen.repeat.gate on synthetic, seeded summaries."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.errors import ConfigError
from loadgen.repeat.gate import (
    NOT_DISTINGUISHABLE,
    Rule,
    direction,
    format_gate,
    gate,
    parse_fail_on,
    regressions,
)
from loadgen.repeat.summary import finding_lines, finding_text, format_repeat_table, repeat_summary


def _summary(tput: dict[int, float], ttft: float, knee: int | None, slo: int | None = None) -> dict:
    stages = [{"index": i, "concurrency": c, "search": False, "output_tokens_per_s": t, "ttft_p50_s": ttft,
               "requests": 10, "error_count": 0} for i, (c, t) in enumerate(sorted(tput.items()))]
    return {"knee": {"concurrency": knee, "threshold": 0.1}, "slo": {"max_concurrency": slo},
            "guard": {"max_concurrency": 512}, "scenario": {}, "stages": stages}


def _repeat(rng, scale: float, n: int = 4, knees=(16, 16, 32, 16)) -> dict:
    summaries = [_summary({c: scale * 100.0 * min(c, 16) * rng.normal(1.0, 0.01) for c in (4, 16, 64)},
                          0.2 * rng.normal(1.0, 0.01), knees[k % len(knees)], 32) for k in range(n)]
    reps = [{"folder": f"r{k}", "prompt_seed": k, "arrival_seed": k, "exit_code": 0} for k in range(n)]
    return repeat_summary(summaries, reps)


def test_repeat_summary_keeps_each_repetition_and_intervals():
    rng = np.random.default_rng(1)
    rep = _repeat(rng, 1.0)
    assert [r["index"] for r in rep["repetitions"]] == [1, 2, 3, 4]
    assert rep["load"] == "concurrency"
    stage = next(s for s in rep["stages"] if s["load"] == 16)
    iv = stage["metrics"]["output_tokens_per_s"]
    assert len(iv["values"]) == 4 and iv["low"] < iv["mid"] < iv["high"]
    assert iv["low"] < 1600 < iv["high"]  # 1 % noise over 4 repetitions around the true 1600
    knee = rep["findings"]["knee"]
    assert (knee["mid"], knee["low"], knee["high"], knee["confidence"]) == (16, 16, 32, 0.875)
    assert rep["findings"]["kv_max"]["values"] == [512] * 4


def test_answer_text_says_the_range_and_its_confidence():
    assert finding_text({"mid": 56, "low": 48, "high": 64, "confidence": 0.75, "n": 3, "of": 3}, False) == \
        "C=56 (48–64, 75 %: the range of 3)"
    assert finding_text({"mid": 56, "low": 48, "high": 64, "confidence": 0.979, "n": 10, "of": 10}, False) == \
        "C=56 (48–64, 98 %)"
    assert "found in 2 of 3" in finding_text({"mid": 4, "low": 4, "high": 8, "confidence": 0.5, "n": 2, "of": 3}, True)
    assert finding_text({"mid": None, "low": None, "high": None, "confidence": None, "n": 0, "of": 3},
                       False).startswith("none")


def test_console_lines():
    rep = _repeat(np.random.default_rng(2), 1.0)
    lines = finding_lines(rep)
    assert lines[0].startswith("knee") and "C=16 (16–32, 88 %: the range of 4)" in lines[0]
    table = format_repeat_table(rep)
    assert "4 repetitions" in table and "Output tok/s" in table


def test_parse_fail_on():
    assert parse_fail_on("output_tokens_per_s:-5%, ttft_p99_s:+10%") == (
        Rule("output_tokens_per_s", -0.05), Rule("ttft_p99_s", 0.10))
    assert parse_fail_on("knee:-20%") == (Rule("knee", -0.2),)
    for bad in ("tput:-5%", "output_tokens_per_s:5%", "output_tokens_per_s:+5%", "ttft_p99_s:-5%",
                "output_tokens_per_s", "output_tokens_per_s:-x%", ",", "ttft_p99_s:+0%"):
        with pytest.raises(ConfigError):
            parse_fail_on(bad)


def test_direction():
    assert direction("output_tokens_per_s") == 1 and direction("achieved_rate_per_s") == 1
    assert direction("ttft_p99_s") == -1 and direction("usd_per_million_output_tokens") == -1
    assert direction("input_len_p50_tokens") == 0 and direction("knee") == 1


def test_gate_fails_on_a_ten_percent_throughput_drop():
    rng = np.random.default_rng(3)
    base, cand = _repeat(rng, 1.0), _repeat(rng, 0.9)
    rules = parse_fail_on("output_tokens_per_s:-5%")
    changes = gate(base, cand, rules)
    failed = regressions(changes)
    assert {v.load for v in failed} == {4, 16, 64}
    assert all(v.assessment == "worse" and v.change == pytest.approx(-0.1, abs=0.02) for v in failed)
    ttft = [v for v in changes if v.key == "ttft_p50_s"]
    assert all(v.failed is None for v in ttft)
    assert "FAIL output_tokens_per_s:-5%" in format_gate(changes, rules, "concurrency", ("output_tokens_per_s",))


def test_gate_passes_on_the_same_configuration_and_a_small_drop():
    rng = np.random.default_rng(4)
    base, same = _repeat(rng, 1.0), _repeat(rng, 1.0)
    rules = parse_fail_on("output_tokens_per_s:-5%")
    assert regressions(gate(base, same, rules)) == []
    small = _repeat(rng, 0.98)  # significant at 1 % noise, but within the 5 % threshold
    changes = gate(base, small, rules)
    assert regressions(changes) == []
    assert any(v.assessment == "worse" for v in changes if v.key == "output_tokens_per_s")


def test_gate_answers_with_three_repetitions_are_not_distinguishable():
    rng = np.random.default_rng(5)
    base = _repeat(rng, 1.0, n=3, knees=(64,))
    cand = _repeat(rng, 1.0, n=3, knees=(16,))
    knee = next(v for v in gate(base, cand, parse_fail_on("knee:-10%")) if v.key == "knee")
    assert knee.assessment == NOT_DISTINGUISHABLE and knee.failed is None  # p = 0.1 at best with 3 vs 3
    base4, cand4 = _repeat(rng, 1.0, n=4, knees=(64,)), _repeat(rng, 1.0, n=4, knees=(16,))
    knee = next(v for v in gate(base4, cand4, parse_fail_on("knee:-10%")) if v.key == "knee")
    assert knee.assessment == "worse" and knee.failed == Rule("knee", -0.1)


def test_gate_refuses_a_rate_sweep_against_a_concurrency_sweep():
    rng = np.random.default_rng(6)
    base, cand = _repeat(rng, 1.0), _repeat(rng, 1.0)
    cand["load"] = "offered_rate_per_s"
    with pytest.raises(ConfigError):
        gate(base, cand)


def _write(tmp_path, name: str, repeat: dict):
    import json

    folder = tmp_path / name
    folder.mkdir()
    (folder / "repeat.json").write_text(json.dumps(repeat))
    return folder


def test_report_compare_exit_codes_on_repeat_folders(tmp_path, capsys):
    from loadgen.errors import EXIT_CONFIG, EXIT_OK, EXIT_REGRESSION
    from loadgen.report.__main__ import main

    rng = np.random.default_rng(8)
    base = _write(tmp_path, "base", _repeat(rng, 1.0))
    same = _write(tmp_path, "same", _repeat(rng, 1.0))
    slow = _write(tmp_path, "slow", _repeat(rng, 0.9))
    rule = ["--fail-on", "output_tokens_per_s:-5%"]
    out = ["--out", str(tmp_path / "gate")]
    assert main(["compare", str(base), str(slow), *rule, *out]) == EXIT_REGRESSION
    assert "FAIL output_tokens_per_s:-5%" in (tmp_path / "gate" / "gate.txt").read_text()
    assert main(["compare", str(base), str(same), *rule, *out]) == EXIT_OK
    assert main(["compare", str(base), str(slow), *out]) == EXIT_OK  # no rule: changes only
    assert "worse" in capsys.readouterr().out
    assert main(["compare", str(base), str(tmp_path), *rule, *out]) == EXIT_CONFIG  # no repeat.json
    assert main(["compare", str(base), str(slow), "--fail-on", "output_tokens_per_s:+5%", *out]) == EXIT_CONFIG


def test_repeat_summary_of_rate_sweeps_matches_stages_by_offered_rate():
    def rate_summary(achieved: list[float], knee: float, slo: float) -> dict:
        stages = [{"index": i, "concurrency": None, "offered_rate_per_s": r, "achieved_rate_per_s": a,
                   "search": False} for i, (r, a) in enumerate(zip((2.0, 4.0), achieved, strict=True))]
        stages.append({"index": 2, "concurrency": None, "offered_rate_per_s": 3.0, "achieved_rate_per_s": 2.9,
                       "search": True})  # a search stage that only this repetition ran
        return {"knee": {"concurrency": None, "rate_per_s": knee}, "slo": {"max_concurrency": slo},
                "guard": {"max_concurrency": None}, "stages": stages}

    summaries = [rate_summary([2.0, 3.9], 4.0, 3.0), rate_summary([2.1, 4.1], 4.0, 2.0)]
    summaries[1]["stages"].pop()
    rep = repeat_summary(summaries, [{"folder": "a"}, {"folder": "b"}])
    assert rep["load"] == "offered_rate_per_s"
    assert [s["load"] for s in rep["stages"]] == [2.0, 3.0, 4.0]
    search = rep["stages"][1]["metrics"]["achieved_rate_per_s"]
    assert (search["n"], search["of"], search["values"]) == (1, 2, [2.9, None])
    lines = finding_lines(rep)
    assert "SLO maximum" in lines[1] and "2.5 req/s (2–3 req/s, 50 %: the range of 2)" in lines[1]
    assert "none (not found in any of 2" in lines[2]


def test_the_kv_bounded_maximum_of_a_rate_sweep_is_a_concurrency():
    summary = {"knee": {"concurrency": None, "rate_per_s": 4.0}, "slo": None, "guard": {"max_concurrency": 512},
               "stages": [{"index": 0, "concurrency": None, "offered_rate_per_s": 4.0, "achieved_rate_per_s": 4.0}]}
    lines = finding_lines(repeat_summary([summary, summary], [{"folder": "a"}, {"folder": "b"}]))
    assert "4 req/s" in lines[0] and "KV-bounded maximum  C=512 (512–512" in lines[-1]


def _schema_1(repeat: dict) -> dict:
    """``repeat`` as the first schema wrote it: its findings under "answers"."""
    old = {**repeat, "schema": "llm-loadgen-repeat/1", "answers": repeat["findings"]}
    del old["findings"]
    old["repetitions"] = [{**{k: v for k, v in r.items() if k != "findings"}, "answers": r["findings"]}
                          for r in repeat["repetitions"]]
    return old


def test_the_gate_reads_a_schema_1_repeat_folder_as_the_current_one(tmp_path):
    """repeat.json schema 1 called the findings "answers": the gate between an old and a new folder
    gives the same assessments as between two new ones."""
    from loadgen.repeat.gate_command import load_repeat
    from loadgen.repeat.summary import REPEAT_SCHEMA, upgraded

    rng = np.random.default_rng(3)
    base, cand = _repeat(rng, 1.0), _repeat(rng, 0.9, knees=(32, 32, 32, 32))
    old = _write(tmp_path, "old", _schema_1(base))
    read = load_repeat(old)
    assert read["schema"] == REPEAT_SCHEMA and read["findings"] == base["findings"] and "answers" not in read
    assert [r["findings"] for r in read["repetitions"]] == [r["findings"] for r in base["repetitions"]]
    assert [c.to_dict() for c in gate(read, cand)] == [c.to_dict() for c in gate(base, cand)]
    assert upgraded(base) is base  # the current schema as it is
