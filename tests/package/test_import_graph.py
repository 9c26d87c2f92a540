"""No import circle anywhere in the package: the module import graph of allocators, workloads, sim and
gpu_validation has no cycle.

Every ``import`` counts, at module level or inside a function: a lazy import that closes a circle (a value
object loading presets by name, an allocator importing its own audit) still ties the two modules together.
A submodule's implicit import of its parent package is not counted (a package's ``__init__`` re-exporting its
submodules is the usual façade, not a circle).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("allocators", "workloads", "sim", "gpu_validation")
KNOWN_CYCLES: set[frozenset[str]] = set()
"""Circles another change on its way removes; each must still exist (the test fails once one is gone, so the
entry is deleted with it) and none may grow."""


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package modules it imports (``from a.b import c`` is ``a.b.c`` if that is a module)."""
    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(known(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package
                    for _ in range(node.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{base}" if base else anchor
                targets.update(known(f"{base}.{a.name}") if f"{base}.{a.name}" in mods else known(base)
                               for a in node.names)
        graph[name] = {t for t in targets if t is not None and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_the_graph_sees_every_package():
    graph = import_graph(modules())
    assert {name.partition(".")[0] for name in graph} == set(PACKAGES)
    assert "workloads.presets" in graph["workloads.named"]


def test_cycle_finder_finds_a_lazy_circle():
    """Guards the finder itself: a circle closed by a function-level import is a circle."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_in_the_package():
    found = set(cycles(import_graph(modules())))
    new = [sorted(c) for c in found - KNOWN_CYCLES]
    assert not new, f"import circles: {new}"
    gone = [sorted(c) for c in KNOWN_CYCLES - found]
    assert not gone, f"these circles are gone: delete them from KNOWN_CYCLES: {gone}"


def test_gpu_validation_never_imports_sim():
    """Guards the arrow of ``docs/architecture.md``: `gpu_validation` uses `allocators` (catalog, roofline) and
    never `sim`, not even lazily (the shipped-tables lookup once pulled `sim.kernel.calibration_store` in)."""
    graph = import_graph(modules())
    bad = {name: sorted(t for t in targets if t.partition(".")[0] == "sim")
           for name, targets in graph.items() if name.partition(".")[0] == "gpu_validation"}
    bad = {name: targets for name, targets in bad.items() if targets}
    assert not bad, f"gpu_validation imports sim: {bad}"


def test_the_sim_rule_sees_a_lazy_import(tmp_path):
    """Guards the rule above: a function-level ``from sim... import`` in gpu_validation is an edge."""
    module = tmp_path / "gpu_validation" / "probe.py"
    module.parent.mkdir()
    module.write_text("def f():\n    from sim.kernel.calibration_store import SHIPPED_DIR\n")
    mods = {"gpu_validation.probe": module, "sim.kernel.calibration_store": tmp_path / "c.py"}
    (tmp_path / "c.py").write_text("")
    assert import_graph(mods)["gpu_validation.probe"] == {"sim.kernel.calibration_store"}
