"""The benchmarks (bench/, run by hand and by ``make bench``) import names that exist: a module moved
or a helper renamed breaks a benchmark nobody runs in the suite, so every ``from X import names``
of a bench script is resolved here (without running the script)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = sorted((ROOT / "bench").glob("*.py"))


def imported_names(path: Path) -> list[tuple[str, str]]:
    """(module, name) of every ``from module import name`` of ours (loadgen, tests, shapes)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] in ("loadgen", "tests", "shapes"):
            out += [(node.module, alias.name) for alias in node.names if alias.name != "*"]
    return out


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_every_name_a_benchmark_imports_exists(path):
    missing = []
    for module, name in imported_names(path):
        mod = importlib.import_module(module)
        if not hasattr(mod, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"from {module} import {name}")
    assert missing == [], f"{path.name}: {missing}"
