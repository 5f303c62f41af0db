"""loadgen.repeat.runner's argument handling (no process started): --repeat taken out, the seeds of
repetition k, the child's arguments; the faces that refuse --repeat."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.cli import main as cli_main
from loadgen.errors import EXIT_CONFIG, ConfigError
from loadgen.repeat.runner import make_repeat_dir, repetition_args, seeds, split_repeat


def test_split_repeat_both_spellings_and_absent():
    assert split_repeat(["--host", "h", "--repeat", "3"]) == (3, ["--host", "h"])
    assert split_repeat(["--repeat=5", "--stages", "1"]) == (5, ["--stages", "1"])
    args = ["--host", "h"]
    assert split_repeat(args) == (None, args)


@pytest.mark.parametrize("bad", [["--repeat", "0"], ["--repeat", "x"], ["--repeat"],
                                 ["--repeat", "3", "--master"]])
def test_split_repeat_refuses(bad):
    with pytest.raises(ConfigError):
        split_repeat(bad)


def test_seeds_derive_from_the_base_and_the_index():
    assert seeds([], 0) == (0, None)
    assert seeds(["--seed", "7"], 2) == (9, None)
    assert seeds(["--seed=7", "--arrival-seed", "100"], 1) == (8, 101)
    with pytest.raises(ConfigError):
        seeds(["--seed", "abc"], 0)


def test_repetition_args_replace_results_dir_and_seeds():
    args = ["--host", "h", "--results-dir", "out", "--seed", "4", "--arrival-seed=9", "--stages", "1,2"]
    assert repetition_args(args, 2, Path("out/r")) == [
        "--host", "h", "--stages", "1,2", "--results-dir", "out/r", "--seed", "6", "--arrival-seed", "11"]


def test_make_repeat_dir_never_reuses_a_folder(tmp_path):
    args = ["--results-dir", str(tmp_path)]
    first, second = make_repeat_dir(args, 3, 0.0), make_repeat_dir(args, 3, 0.0)
    assert first.name == "19700101-000000_repeat3" and second.name == "19700101-000000_repeat3-2"


def test_cli_refuses_repeat_in_the_web_ui_and_a_bad_n(capsys):
    assert cli_main(["web", "--repeat", "3"]) == EXIT_CONFIG
    assert "llm-loadgen --repeat N" in capsys.readouterr().err
    assert cli_main(["--host", "http://127.0.0.1:9", "--repeat", "0"]) == EXIT_CONFIG
    assert "--repeat" in capsys.readouterr().err
