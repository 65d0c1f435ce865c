"""The package's import rules, read from the source. Every import counts: those inside
functions and those under ``if TYPE_CHECKING:`` too (a cycle closed only by a function-level
or type-checking import is still a cycle to read through).

* the trial side (``hyperfleet.trials``, and the trainer callbacks in ``hyperfleet.integrations``,
  which run inside trial processes) never imports the control plane (``hyperfleet.platform``);
* ``hyperfleet.spec`` imports neither side, nor torch;
* the control plane reaches torch only through the code of its trial processes
  (``hyperfleet.platform.trial_entry`` and ``hyperfleet.platform.launcher.trial_process``),
  whose own torch imports are inside functions;
* no import cycle exists anywhere in ``hyperfleet/``;
* the platform imports the trial side only in its trial processes' code;
* the platform's folders (and its loose modules) form one order: each imports only those below
  it (``tests/test_folder_order.py``);
* the schedulers' wings (``schedulers.optuna``, ``schedulers.pbt``) are imported only by the
  platform's control path; every scheduler's configuration is in ``config/``;
* the dashboards never reach a module that writes.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "hyperfleet"
ENTRY = "hyperfleet.platform.trial_entry"
# the code of trial processes: the -m entry point and what every trial process runs (the
# in-process worker's too); the only platform modules through which torch may be reached
# the platform's code that runs inside trial processes: the entry point, what it runs, and
# hyperfleet.trial() inside a script trial's program
TRIAL_PROCESS = (
    ENTRY,
    "hyperfleet.platform.launcher.trial_process",
    "hyperfleet.platform.launcher.script.push",
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(tree: ast.AST) -> Iterator[tuple[str, list[str]]]:
    """``(module, names)`` of every import anywhere in ``tree``: in functions and under
    ``if TYPE_CHECKING:`` too."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, [a.name for a in node.names]


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


# what runs inside trial processes and must never reach the control plane
TRIAL_SIDE = ("hyperfleet.trials", "hyperfleet.integrations")


def test_the_trial_side_never_imports_the_platform() -> None:
    bad = {
        m: sorted(e for e in GRAPH[m] if e.startswith("hyperfleet.platform"))
        for m in MODULES
        if m.startswith(TRIAL_SIDE)
    }
    assert not {m: e for m, e in bad.items() if e}


def test_the_platform_imports_the_trial_side_only_in_trial_process_code() -> None:
    """What both sides need (the workload catalogue, a report's step check) is in ``spec``."""
    bad = {
        m: sorted(e for e in GRAPH[m] if _in(e, ("hyperfleet.trials",)))
        for m in MODULES
        if _in(m, ("hyperfleet.platform",)) and m not in TRIAL_PROCESS
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
            if nxt in MODULES and nxt not in TRIAL_PROCESS and nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def test_the_platform_reaches_torch_only_through_its_trial_processes_code() -> None:
    paths = {
        m: _reaches_torch(m)
        for m in MODULES
        if m.startswith("hyperfleet.platform") and m not in TRIAL_PROCESS
    }
    assert not {m: p for m, p in paths.items() if p}


def test_the_trial_processes_code_imports_torch_lazily() -> None:
    for module in TRIAL_PROCESS:
        tree = ast.parse(MODULES[module].read_text())
        top = {t for node in tree.body for t, _ in _imports(ast.Module([node], []))
               if not isinstance(node, (ast.FunctionDef, ast.ClassDef))}  # fmt: skip
        lazy = {t for t in top if t == "torch" or t.startswith(("torch.", "hyperfleet.trials"))}
        assert not lazy, (module, lazy)


def test_no_launcher_imports_the_trial_entry_point() -> None:
    """The launchers name the entry point on command lines only: it imports them."""
    launchers = [m for m in MODULES if m.startswith("hyperfleet.platform.launcher.")]
    assert launchers
    assert not [m for m in launchers if ENTRY in GRAPH[m]]


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


WINGS = ("hyperfleet.platform.schedulers.optuna", "hyperfleet.platform.schedulers.pbt")
# the platform's control path: it builds and drives schedulers, so it may reach into a wing
CONTROL_PATH = (
    "hyperfleet.platform.schedulers",  # the package (build_scheduler) and the wings themselves
    "hyperfleet.platform.controller",
    "hyperfleet.platform.recorder",
    "hyperfleet.platform.sweeps",
    "hyperfleet.platform.cli",  # e.g. ``hyperfleet pbt replay``
)


def _in(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(f"{p}.") for p in prefixes)


def test_only_the_control_path_imports_the_schedulers_wings() -> None:
    """The dashboards, tracking (``tracking.lineage``), config and storage never import a
    scheduler's implementation; what they need of PBT's population is storage's."""
    bad = {(m, e) for m in MODULES if not _in(m, CONTROL_PATH) for e in GRAPH[m] if _in(e, WINGS)}
    assert sorted(bad) == []


def test_a_config_module_imports_no_scheduling_code() -> None:
    """Every scheduler's configuration is in ``config/`` (``config/schedulers.py``,
    ``config/pbt.py``): validating a sweep file loads no scheduling code."""
    configs = [m for m in MODULES if _in(m, ("hyperfleet.platform.config",))]
    assert configs
    schedulers = ("hyperfleet.platform.schedulers",)
    reached = {e for m in configs for e in _reachable(m) if _in(e, schedulers)}
    assert not reached, sorted(reached)


def _reachable(start: str) -> set[str]:
    """Every hyperfleet module ``start`` imports, directly or through others."""
    seen, stack = set(), [start]
    while stack:
        for nxt in GRAPH[stack.pop()]:
            if nxt in MODULES and nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


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
    "hyperfleet.integrations",
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


# where launchers, handles and trial records are used: capabilities are declared, never probed
DECLARED_ONLY = ("hyperfleet.platform.controller", "hyperfleet.platform.worker")


def test_the_control_loop_probes_no_capability() -> None:
    """No ``getattr``/``hasattr`` in the controller and the worker: what a launcher, a handle or
    a record offers is declared on its class (``launcher/base.py``, ``storage/records.py``)."""
    probes = [
        f"{m}:{node.lineno}"
        for m in MODULES
        if _in(m, DECLARED_ONLY)
        for node in ast.walk(ast.parse(MODULES[m].read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr")
    ]
    assert probes == []


# the one module allowed past MODULE_LINES: Optuna's private names, kept in one place
LONG_ALLOWED = {PACKAGE / "platform" / "schedulers" / "optuna" / "internals.py"}
MODULE_LINES = 400


def test_no_module_is_over_400_lines_but_the_optuna_adapter() -> None:
    """A module a reader takes in one sitting: at most 400 lines, except the Optuna adapter
    (``schedulers/optuna/internals.py``), which holds every use of Optuna's private names."""
    assert all(path.is_file() for path in LONG_ALLOWED), "an allowed long module was moved"
    lines = {path: len(path.read_text().splitlines()) for path in PACKAGE.rglob("*.py")}
    assert len(lines) > 100  # the walk found the package
    over = {
        str(path.relative_to(PACKAGE)): n
        for path, n in lines.items()
        if n > MODULE_LINES and path not in LONG_ALLOWED
    }
    assert over == {}, f"split these along a seam of their own: {over}"
