"""scripts/run_tests.py's order: shared integration files slowest first, solo files last."""

from __future__ import annotations

import importlib.util

from tests.support.runlocust import ROOT

spec = importlib.util.spec_from_file_location("run_tests", ROOT / "scripts" / "run_tests.py")
run_tests = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run_tests)


def test_shared_files_slowest_first_then_solo_files_and_unknown_files_by_size(tmp_path):
    def write(name: str, solo: bool, size: int):
        mark = "solo" if solo else "integ" + "ration"  # spelled apart: run_tests reads this file's text too
        (tmp_path / name).write_text(f"pytestmark = [pytest.mark.{mark}]\n" + "#" * size)
        return tmp_path / name

    files = [write("a.py", False, 10), write("b.py", True, 10), write("c.py", False, 10),
             write("d.py", True, 10), write("e.py", False, 5000), write("f.py", False, 10)]
    (tmp_path / "g.py").write_text("pytestmark = [pytest.mark.so" + "lo, pytest.mark.al" + "one]\n")
    files.append(tmp_path / "g.py")
    seconds = {"a.py": 5.0, "b.py": 30.0, "c.py": 90.0, "d.py": 60.0, "g.py": 99.0}  # e, f: never timed
    order = [f.name for f in run_tests.run_order(files, seconds)]
    assert order == ["c.py", "a.py", "e.py", "f.py", "d.py", "b.py", "g.py"]


SOLO = {"s1", "s2", "s3"}


def test_shared_processes_first_then_the_solo_files_solo_jobs_at_a_time():
    queue = ["unit", "a", "b", "s1", "s2", "s3"]
    assert run_tests.to_start(queue, [], SOLO, 2, 2) == ["unit", "a"]
    assert run_tests.to_start(["b", "s1", "s2", "s3"], ["a"], SOLO, 2, 2) == ["b"]
    assert run_tests.to_start(["s1", "s2", "s3"], ["b"], SOLO, 2, 2) == []  # a shared file still runs
    assert run_tests.to_start(["s1", "s2", "s3"], [], SOLO, 2, 2) == ["s1", "s2"]
    assert run_tests.to_start(["s3"], ["s2"], SOLO, 2, 2) == ["s3"]
    assert run_tests.to_start(["s2", "s3"], ["s1"], SOLO, 3, 1) == []  # one at a time: each alone
    assert run_tests.to_start(["s1", "s2"], [], SOLO, 3, 1) == ["s1"]


def test_a_solo_file_marked_alone_runs_with_nothing_beside_it():
    alone = frozenset({"s3"})
    assert run_tests.to_start(["s2", "s3"], ["s1"], SOLO, 2, 2, alone) == ["s2"]
    assert run_tests.to_start(["s3"], ["s2"], SOLO, 2, 2, alone) == []  # waits for s2
    assert run_tests.to_start(["s3"], [], SOLO, 2, 2, alone) == ["s3"]
    assert run_tests.to_start(["s3", "s1"], [], SOLO, 2, 2, alone) == ["s3"]  # and nothing after it joins
    assert run_tests.to_start(["s1"], ["s3"], SOLO, 2, 2, alone) == []


def test_a_span_lasts_from_the_first_start_to_the_last_end():
    class Ran:
        def __init__(self, started, ended):
            self.started, self.ended = started, ended

    assert run_tests.span_seconds([Ran(10.0, 50.0), Ran(12.0, 70.0), Ran(60.0, 65.0)]) == 60.0
    assert run_tests.span_seconds([]) == 0.0
