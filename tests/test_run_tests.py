"""scripts/run_tests.py's order: shared integration files slowest first, solo files last."""

from __future__ import annotations

import importlib.util

from tests.runlocust import ROOT

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
    seconds = {"a.py": 5.0, "b.py": 30.0, "c.py": 90.0, "d.py": 60.0}  # e, f: never timed
    order = [f.name for f in run_tests.run_order(files, seconds)]
    assert order == ["c.py", "a.py", "e.py", "f.py", "d.py", "b.py"]
