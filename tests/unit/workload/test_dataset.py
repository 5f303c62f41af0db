"""Datasets: parsing and validation with line numbers, CSV, shares across workers, context checks."""

from __future__ import annotations

import json

import pytest

from loadgen.workload.dataset import DatasetError, load_dataset, share, too_long


def write(tmp_path, lines, name="d.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return str(p)


def test_lengths_text_ids_messages_and_mooncake_names(tmp_path):
    path = write(tmp_path, [
        {"input_tokens": 100, "output_tokens": 20},
        {"prompt": "hello there", "output_tokens": 5},
        {"prompt": [1, 2, 3]},
        "",
        {"timestamp": 0, "input_length": 1024, "output_length": 8, "hash_ids": [1, 2]},
    ])
    with pytest.raises(DatasetError):  # timestamps on one line only
        load_dataset(path, "completions")
    path = write(tmp_path, [{"input_tokens": 100, "output_tokens": 20}, {"prompt": "hello there"},
                            {"prompt": [1, 2, 3]}, "", {"input_length": 1024, "output_length": 8, "hash_ids": [1, 2]}])
    reqs = load_dataset(path, "completions")
    assert [r.line for r in reqs] == [1, 2, 3, 5]
    assert (reqs[0].input_tokens, reqs[0].output_tokens) == (100, 20)
    assert reqs[1].prompt == "hello there" and reqs[1].output_tokens is None
    assert reqs[2].prompt == (1, 2, 3)
    assert reqs[3].hash_ids == (1, 2) and reqs[3].input_tokens == 1024
    chat = write(tmp_path, [{"messages": [{"role": "user", "content": "hi"}], "timestamp": 5.5}], "c.jsonl")
    assert load_dataset(chat, "chat")[0].timestamp_ms == 5.5


def test_errors_name_file_line_and_fix_the_first_few(tmp_path):
    bad = [{"input_tokens": 0}, "{nope", {"prompt": "x", "input_tokens": 3}, {"output_tokens": 3},
           {"input_tokens": 5, "colour": 1}, {"messages": [{"role": "user", "content": "x"}]},
           {"prompt": [1, "a"]}, {"input_tokens": 2, "hash_ids": "ab"}]
    path = write(tmp_path, [{"input_tokens": 1}] + bad)
    with pytest.raises(DatasetError) as err:
        load_dataset(path, "completions")
    e = err.value
    assert e.total == 8 and len(e.problems) == 5
    assert e.problems[0] == f"{path}:2: input_tokens must be an integer >= 1, got 0"
    assert e.problems[1].startswith(f"{path}:3: not valid JSON")
    assert "exactly one of input_tokens, prompt, messages (has input_tokens, prompt)" in e.problems[2]
    assert "unknown field(s) colour" in e.problems[4]
    assert "8 bad line(s)" in str(e) and str(e).startswith("--dataset")


def test_endpoint_mismatches_are_errors(tmp_path):
    with pytest.raises(DatasetError, match="needs --endpoint completions"):
        load_dataset(write(tmp_path, [{"prompt": [1, 2]}]), "chat")
    with pytest.raises(DatasetError, match="need --endpoint chat"):
        load_dataset(write(tmp_path, [{"messages": [{"role": "user", "content": "x"}]}]), "completions")


def test_empty_and_unreadable(tmp_path):
    with pytest.raises(DatasetError, match="no requests"):
        load_dataset(write(tmp_path, [""]), "completions")
    with pytest.raises(Exception, match="cannot be read"):
        load_dataset(str(tmp_path / "missing.jsonl"), "completions")


def test_csv_with_header(tmp_path):
    p = tmp_path / "d.csv"
    p.write_text("input_tokens,output_tokens,timestamp\n100,10,0\n200,20,1.5\n")
    reqs = load_dataset(str(p), "completions")
    assert [(r.line, r.input_tokens, r.output_tokens, r.timestamp_ms) for r in reqs] == [
        (2, 100, 10, 0.0), (3, 200, 20, 1.5)]
    p.write_text("input_tokens,output_tokens\n100,x\n")
    with pytest.raises(DatasetError, match=r"d.csv:2: output_tokens must be an integer"):
        load_dataset(str(p), "completions")


def test_shares_are_disjoint_and_cover_the_file(tmp_path):
    reqs = load_dataset(write(tmp_path, [{"input_tokens": i + 1} for i in range(101)]), "completions")
    for shuffle in (False, True):
        parts = [share(reqs, i, 3, shuffle, seed=7) for i in range(3)]
        lines = [r.line for p in parts for r in p]
        assert sorted(lines) == list(range(1, 102)) and len(set(lines)) == 101
    assert [r.line for r in share(reqs, 0, 1, False, 0)] == list(range(1, 102))
    assert [r.line for r in share(reqs, 0, 1, True, 7)] != list(range(1, 102))
    assert share(reqs, 1, 3, True, 7) == share(reqs, 1, 3, True, 7)


def test_too_long_counts_and_names_the_worst(tmp_path):
    reqs = load_dataset(write(tmp_path, [{"input_tokens": 100}, {"input_tokens": 900, "output_tokens": 200},
                                         {"input_tokens": 1500}, {"prompt": "text only"}]), "completions")
    count, worst = too_long(reqs, default_output=100, max_model_len=1000)
    assert count == 2 and worst.line == 3
