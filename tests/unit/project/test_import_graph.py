"""The import graph of loadgen/: imports point down the layers (``loadgen.LAYERS``), no cycles (lazy
imports included), and every module imports alone.

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

from loadgen import APART, LAYERS, SIM_USERS
from scripts import architecture

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "loadgen"

# Function-level imports of loadgen modules allowed in loadgen/report, and why.
LAZY_REPORT_IMPORTS = {
    ("loadgen.report.files", "loadgen.report.plots"): "matplotlib costs ~1 s of CPU between stages",
    ("loadgen.report.files", "loadgen.report.fit_plot"): "the same: a what-if's fit plot, matplotlib",
    ("loadgen.repeat.report_files", "loadgen.report.plots"): "loadgen.cli imports repeat.runner for every run",
    ("loadgen.repeat.report_files", "loadgen.repeat.plots"): "the same, matplotlib",
}


MODULES = {name: path for name, path in architecture.modules().items() if name.split(".")[0] == "loadgen"}


def imports(name: str) -> list[tuple[str, bool]]:
    """(imported loadgen module, lazy) for every import statement of module ``name``."""
    return architecture.imports(name, MODULES)


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
        if name.startswith(("loadgen.report", "loadgen.repeat"))
        for target, is_lazy in edges
        if is_lazy
    }
    assert lazy == set(LAZY_REPORT_IMPORTS)


@pytest.mark.parametrize("name", [n for n in MODULES if n.startswith(("loadgen.report", "loadgen.repeat", "loadgen.analysis", "loadgen.stats.metrics"))])
def test_module_imports_alone_in_a_fresh_interpreter(name):
    out = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr


def layer_of(name: str, layers=LAYERS, apart=APART) -> int | str:
    """The index in ``layers`` of the entry holding module ``name`` (the entry with the longest
    prefix of it: ``loadgen.report.__main__`` is a face, ``loadgen.report.html`` is report), or the
    apart package's name."""
    for prefix in apart:
        if name == prefix or name.startswith(prefix + "."):
            return prefix
    found = [(len(p), i) for i, entry in enumerate(layers) for p in entry
             if name == p or name.startswith(p + ".")]
    if not found:
        raise LookupError(name)
    return max(found)[1]


def upward_imports(graph, layers=LAYERS, apart=APART) -> list[str]:
    """Every import (lazy ones too) of a module from a layer above its own, or into or out of an
    apart package, as 'a -> b (layer x imports layer y)'."""
    bad = []
    for name, edges in graph.items():
        if name == "loadgen":
            continue
        mine = layer_of(name, layers, apart)
        for target, _ in edges:
            theirs = layer_of(target, layers, apart)
            if isinstance(theirs, str) and not isinstance(mine, str) and _sim_user(name):
                ok = True  # loadgen.whatif runs the engine model; the apart ones import nothing back
            elif isinstance(mine, str) and isinstance(theirs, str):
                ok = apart.index(theirs) <= apart.index(mine)  # sim runs the engine model, not back
            elif isinstance(mine, str) or isinstance(theirs, str):
                ok = False
            else:
                ok = theirs <= mine
            if not ok:
                bad.append(f"{name} -> {target} (layer {mine} imports layer {theirs})")
    return sorted(bad)


def _sim_user(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in SIM_USERS)


def test_only_the_sim_users_may_import_the_simulator_and_the_engine_model():
    graph = {"loadgen.whatif.x": [("loadgen.engine_model.engine", False), ("loadgen.sim.config", False)],
             "loadgen.report.y": [("loadgen.engine_model.engine", False)],
             "loadgen.sim.z": [("loadgen.whatif.x", False), ("loadgen.engine_model.engine", False)],
             "loadgen.engine_model.w": [("loadgen.sim.z", False)]}
    assert upward_imports(graph) == [
        "loadgen.engine_model.w -> loadgen.sim.z (layer loadgen.engine_model imports layer loadgen.sim)",
        f"loadgen.report.y -> loadgen.engine_model.engine (layer {layer_of('loadgen.report.y')} imports layer "
        "loadgen.engine_model)",
        f"loadgen.sim.z -> loadgen.whatif.x (layer loadgen.sim imports layer {layer_of('loadgen.whatif.x')})"]


def test_the_layer_check_finds_an_upward_import():
    layers = (("p.low",), ("p.mid",), ("p.top",))
    graph = {"p.low.a": [("p.mid.b", True)], "p.mid.b": [("p.low.a", False)], "p.top.c": [("p.mid.b", False)],
             "p.sim.x": [("p.low.a", False)]}
    assert upward_imports(graph, layers, ("p.sim",)) == [
        "p.low.a -> p.mid.b (layer 0 imports layer 1)", "p.sim.x -> p.low.a (layer p.sim imports layer 0)"]


def test_every_module_belongs_to_a_layer():
    unplaced = []
    for name in MODULES:
        if name == "loadgen":
            continue
        try:
            layer_of(name)
        except LookupError:
            unplaced.append(name)
    assert unplaced == [], f"modules in no entry of loadgen.LAYERS: {unplaced}"


def test_imports_point_down_the_layers():
    bad = upward_imports(GRAPH)
    assert bad == [], "imports that point up the layers (loadgen/__init__.py's LAYERS):\n" + "\n".join(bad)


def test_loadgen_never_imports_the_faces_above_it():
    """``shapes/`` and ``locustfile.py`` sit on top: nothing in loadgen imports them but the faces of
    its own top layer (the packaged locustfile loads the shape)."""
    bad = []
    for name, path in MODULES.items():
        if name == "loadgen" or layer_of(name) == len(LAYERS) - 1:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad += [f"{name} imports {m}" for m in mods if m.split(".")[0] in ("shapes", "locustfile")]
    assert bad == []
