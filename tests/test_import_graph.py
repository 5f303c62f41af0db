"""The import graph of loadgen/: no cycles (lazy imports included), and every module imports alone.

Read from the source with ``ast``, so a function-level import that would hide a cycle still counts
as an edge. ``from loadgen.report import table`` is an edge to ``loadgen.report.table``; the
implicit import of a parent package (``loadgen.report.__init__`` before ``loadgen.report.table``)
is not, but no module may import a package it belongs to (that is how a facade re-exporting its
submodules turns into a cycle).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "loadgen"

# Function-level imports of loadgen modules allowed in loadgen/report, and why.
LAZY_REPORT_IMPORTS = {
    ("loadgen.report.files", "loadgen.report.plots"): "matplotlib costs ~1 s of CPU between stages",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(name: str) -> list[tuple[str, bool]]:
    """(imported loadgen module, lazy) for every import statement of module ``name``."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    top_level = {id(node) for node in tree.body}
    is_pkg = MODULES[name].name == "__init__.py"
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                base = ".".join(pkg[: len(pkg) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        lazy = id(node) not in top_level
        out += [(t, lazy) for t in targets if t in MODULES and t != name]
    return out


GRAPH = {name: imports(name) for name in MODULES}


def find_cycle(graph: dict[str, list[tuple[str, bool]]]) -> list[str] | None:
    """A cycle as [a, b, ..., a], or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    for start in graph:
        if start in state:
            continue
        path, stack = [start], [iter(graph[start])]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
                continue
            target = nxt[0]
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state:
                state[target] = 1
                path.append(target)
                stack.append(iter(graph[target]))
    return None


def test_cycle_finder_finds_a_lazy_cycle():
    graph = {"a": [("b", False)], "b": [("c", False)], "c": [("a", True)], "d": []}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": [("b", True)], "b": []}) is None


def test_no_import_cycle_in_loadgen_lazy_imports_included():
    assert len(MODULES) > 20 and "loadgen.stats.metrics" in MODULES
    assert find_cycle(GRAPH) is None, f"import cycle: {' -> '.join(find_cycle(GRAPH))}"


def test_no_module_imports_its_own_package():
    bad = [
        (name, target)
        for name, edges in GRAPH.items()
        for target, _ in edges
        if MODULES[target].name == "__init__.py" and name.startswith(target + ".")
    ]
    assert bad == [], "import the submodule, not the package facade"


def test_report_has_no_lazy_imports_but_the_documented_one():
    lazy = {
        (name, target)
        for name, edges in GRAPH.items()
        if name.startswith("loadgen.report")
        for target, is_lazy in edges
        if is_lazy
    }
    assert lazy == set(LAZY_REPORT_IMPORTS)


@pytest.mark.parametrize("name", [n for n in MODULES if n.startswith(("loadgen.report", "loadgen.stats.metrics"))])
def test_module_imports_alone_in_a_fresh_interpreter(name):
    out = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
