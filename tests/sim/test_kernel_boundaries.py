"""The kernel's walls, read from the source (AST): what `sim/kernel/` may import, and who may call an
allocator. Guards the one-way arrows of ``docs/architecture.md``: the CLI, plots, sweeps, reproduction and
trace fitting sit beside the kernel and use it, never the other way; inside the kernel only `KVMemory`
(``sim/kernel/memory.py``) talks to the allocator, through the contract of `allocators.base.Allocator`."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KERNEL = ROOT / "sim" / "kernel"
OUTSIDE = ("sim.commands", "sim.cli", "sim.plots", "sim.sweep", "sim.reproduce", "sim.describe", "sim.trace_fit",
           "sim.replay", "sim.measured", "sim.schedule_jacobian", "sim.trace_search")
ALLOCATOR_IMPORTS = ("allocators.ALLOCATORS", "allocators.make_allocator", "allocators.allocator_class",
                     "allocators.base.Allocator", "allocators.paged", "allocators.contiguous", "allocators.block_pool",
                     "allocators.free_queue", "allocators.prefix_cache", "allocators.placement")
ALLOC_NAMES = {"alloc", "_alloc"}  # (``config.allocator`` is a name, not an allocator)


def kernel_modules():
    modules = sorted(KERNEL.glob("*.py"))
    assert len(modules) > 10
    return [(path, ast.parse(path.read_text())) for path in modules]


def imported(tree, *, modules: bool = True):
    """Every imported name in full (``module.name`` for a from-import); with ``modules`` the modules too."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            if modules:
                yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def test_the_kernel_imports_nothing_from_the_cli_plots_sweeps_or_reproduction():
    for path, tree in kernel_modules():
        bad = [name for name in imported(tree) if name.startswith(OUTSIDE)]
        assert not bad, f"{path.name} imports {bad}"


def test_only_the_memory_module_holds_an_allocator():
    """Only `memory.py` calls allocator methods; `replica.py` builds the allocator and hands it to `KVMemory`
    without calling it; every other kernel module imports from the allocators package only data types and
    facts (`MemoryBreakdown`, `Copy`, the share names, the catalog, the roofline), never an allocator."""
    for path, tree in kernel_modules():
        if path.name == "memory.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                receiver = node.func.value
                name = receiver.id if isinstance(receiver, ast.Name) else getattr(receiver, "attr", None)
                assert name not in ALLOC_NAMES, f"{path.name}:{node.lineno} calls {name}.{node.func.attr}"
            if isinstance(node, ast.Attribute):
                assert node.attr not in ALLOC_NAMES, f"{path.name}:{node.lineno} reaches .{node.attr}"
        builders = {"allocators.allocator_class", "allocators.make_allocator"} if path.name == "replica.py" else set()
        bad = {m for m in imported(tree, modules=False) if m.startswith(ALLOCATOR_IMPORTS) and m not in builders}
        assert not bad, f"{path.name} imports {sorted(bad)}"


def test_no_capability_is_probed():
    """Capabilities are plain attributes of the allocator (``kind``, ``reports_growth``, ...), read once by
    `KVMemory`; nothing in the kernel asks ``getattr``/``hasattr`` whether a method exists."""
    for path, tree in kernel_modules():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            probe = node.func.id == "hasattr" or (node.func.id == "getattr" and len(node.args) == 3)
            target = ast.unparse(node.args[0]) if node.args else ""
            if probe or node.func.id == "getattr":
                assert not (probe and "memory" in target) and "alloc" not in target, (
                    f"{path.name}:{node.lineno} probes {target}")


def test_nobody_touches_an_allocator_counter():
    """The copies a call made come back with its result: no kernel module reads or rolls back a counter."""
    for path in KERNEL.glob("*.py"):
        assert "copied_slots" not in path.read_text(), path.name


def test_the_scheduler_composes_rather_than_inherits():
    """Guards the composition: the scheduler owns its parts (``groups``, ``decode``, ``beams``,
    ``completions``) instead of being one class split across files by a mixin."""
    tree = ast.parse((KERNEL / "scheduler.py").read_text())
    [scheduler] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Scheduler"]
    assert not scheduler.bases
