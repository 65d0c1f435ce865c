"""The package's import rules, read from the source (every import counts, function-level ones
too; only ``if TYPE_CHECKING:`` blocks are exempt):

* the trial side (``hyperfleet.trials``) never imports the control plane (``hyperfleet.platform``);
* ``hyperfleet.spec`` imports neither side, nor torch;
* the control plane reaches torch only through its trial entry point
  (``hyperfleet.platform.trial_entry``), whose own torch imports are inside functions;
* no import cycle exists anywhere in ``hyperfleet/``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "hyperfleet"
ENTRY = "hyperfleet.platform.trial_entry"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[tuple[str, list[str]]]:
    """``(module, names)`` of every import outside ``if TYPE_CHECKING:`` blocks."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            yield from (i for child in node.orelse for i in _imports(ast.Module([child], [])))
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, [a.name for a in node.names]
        else:
            yield from _imports(node)


def edges(module: str) -> set[str]:
    """What ``module`` imports: hyperfleet modules by full name, other packages by top name."""
    tree = ast.parse(MODULES[module].read_text())
    out: set[str] = set()
    for target, names in _imports(tree):
        if not target.startswith("hyperfleet"):
            out.add(target.split(".")[0])
            continue
        submodules = {f"{target}.{n}" for n in names if f"{target}.{n}" in MODULES}
        out.update(submodules)
        if len(submodules) < len(names) or not names:  # attributes of ``target`` itself
            out.add(target)
    return {e for e in out if not e.startswith("hyperfleet") or e in MODULES}


GRAPH = {m: edges(m) for m in MODULES}


def test_the_trial_side_never_imports_the_platform() -> None:
    bad = {
        m: sorted(e for e in GRAPH[m] if e.startswith("hyperfleet.platform"))
        for m in MODULES
        if m.startswith("hyperfleet.trials")
    }
    assert not {m: e for m, e in bad.items() if e}


def test_spec_imports_neither_side_nor_torch() -> None:
    for m in MODULES:
        if m.startswith("hyperfleet.spec"):
            bad = [
                e for e in GRAPH[m] if e.startswith(("hyperfleet.platform", "hyperfleet.trials"))
            ]
            assert not bad and "torch" not in GRAPH[m], (m, bad)


def _reaches_torch(start: str) -> list[str] | None:
    """An import path from ``start`` to torch that does not pass the trial entry point."""
    stack, seen = [(start, [start])], {start}
    while stack:
        node, path = stack.pop()
        for nxt in sorted(GRAPH.get(node, ())):
            if nxt == "torch":
                return [*path, "torch"]
            if nxt in MODULES and nxt != ENTRY and nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def test_the_platform_reaches_torch_only_through_its_trial_entry_point() -> None:
    paths = {
        m: _reaches_torch(m) for m in MODULES if m.startswith("hyperfleet.platform") and m != ENTRY
    }
    assert not {m: p for m, p in paths.items() if p}


def test_the_trial_entry_point_imports_torch_lazily() -> None:
    tree = ast.parse(MODULES[ENTRY].read_text())
    top = {t for node in tree.body for t, _ in _imports(ast.Module([node], []))
           if not isinstance(node, (ast.FunctionDef, ast.ClassDef))}  # fmt: skip
    assert not {t for t in top if t == "torch" or t.startswith(("torch.", "hyperfleet.trials"))}


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), and self-imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in MODULES:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in GRAPH[v]:
                found.append(sorted(component))

    for m in MODULES:
        if m not in index:
            visit(m)
    return found


def test_no_import_cycles() -> None:
    assert _cycles() == []


def test_a_cycle_would_be_found() -> None:
    """The detector itself: a two-module cycle added to the graph is reported."""
    a, b = "hyperfleet.errors", "hyperfleet.spec.layout"  # spec.layout imports errors
    assert a in GRAPH[b]
    GRAPH[a].add(b)
    try:
        assert any({a, b} <= set(c) for c in _cycles())
    finally:
        GRAPH[a].discard(b)


def test_importing_every_platform_module_imports_no_torch() -> None:
    platform = [
        m for m in MODULES if m.startswith("hyperfleet.platform") and not m.endswith("__main__")
    ]
    code = "".join(f"import {m}\n" for m in platform) + (
        "import sys\nbad = [m for m in sys.modules if m == 'torch' or m.startswith('torch.')]\n"
        "assert not bad, bad[:5]\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]


# modules that start sweeps or trials, or write to storage or MLflow: the dashboard reads only
WRITE_PATHS = (
    "hyperfleet.platform.controller",
    "hyperfleet.platform.launcher",
    "hyperfleet.platform.sweeps.run",
    "hyperfleet.platform.recorder",
    "hyperfleet.platform.tracking",
    "hyperfleet.platform.tracking.lineage",
    "hyperfleet.platform.sweeps.enqueue",
    "hyperfleet.platform.sweeps.train",
    "hyperfleet.platform.trial_entry",
    "hyperfleet.trials",
)


def _reaches(start: str, targets: tuple[str, ...]) -> list[str] | None:
    """An import path from ``start`` to a module under one of ``targets``."""
    stack, seen = [(start, [start])], {start}
    while stack:
        node, path = stack.pop()
        for nxt in sorted(GRAPH.get(node, ())):
            if nxt in MODULES and nxt not in seen:
                if nxt.startswith(targets):
                    return [*path, nxt]
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def test_the_dashboard_never_reaches_a_write_path() -> None:
    paths = {m: _reaches(m, WRITE_PATHS) for m in MODULES if m.startswith("hyperfleet.dashboards")}
    assert any(m.startswith("hyperfleet.dashboards.views") for m in paths)
    assert not {m: p for m, p in paths.items() if p}
