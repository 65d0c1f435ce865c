"""Only the adapter module touches Optuna's private names.

``hyperfleet/platform/schedulers/optuna/internals.py`` is written against one Optuna minor
range (pinned in ``pyproject.toml``); everything else in ``hyperfleet/`` calls its functions.
Every module is parsed with ``ast`` (docstrings and comments do not count). In a module that
imports optuna, other than the adapter, each of these is a failure:

1. an import from an optuna path with a ``_``-leading segment (``optuna.storages._rdb``,
   ``optuna._gp``), or of a ``_``-leading name from optuna;
2. an attribute ``x._name`` (one leading underscore; dunders are public protocol) — unless
   ``x`` is ``self`` or ``cls`` and the module itself defines ``_name`` (a method, a class
   attribute or ``self._name = ...``): then it is the module's own state, not an attribute
   inherited from an Optuna class. ``super()._name`` is always inherited, so always a failure;
3. ``getattr``/``setattr``/``hasattr``/``delattr`` with a ``_``-leading constant name;
4. a method named ``_name`` in a class one of whose bases comes from optuna and has that
   name (the base is imported to ask): an override of a private hook.

A module that does not import optuna can reach no Optuna object to take a private name of
except through one it is handed; those come from the adapter's functions or the schedulers,
so rules 1-4 over the modules that import optuna are strict and stay free of false positives
(``self._x`` of the platform's own classes is everywhere and fine).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hyperfleet"
ADAPTER = PACKAGE / "platform" / "schedulers" / "optuna" / "internals.py"
REFLECTION = {"getattr", "setattr", "hasattr", "delattr"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _optuna_names(tree: ast.AST) -> dict[str, tuple[str, str | None]] | None:
    """The names the module binds to optuna objects, each with where it comes from (module,
    attribute or None for the module itself); None where it imports nothing from optuna."""
    names: dict[str, tuple[str, str | None]] = {}
    found = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "optuna":
                    found = True
                    names[alias.asname or "optuna"] = (
                        alias.name if alias.asname else "optuna",
                        None,
                    )
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "optuna":
            found = True
            for alias in node.names:
                names[alias.asname or alias.name] = (node.module or "optuna", alias.name)
    return names if found else None


def _optuna_base(base: ast.expr, names: dict[str, tuple[str, str | None]]) -> object | None:
    """The optuna class a base-class expression names, imported; None if it is not optuna's."""
    parts: list[str] = []
    while isinstance(base, ast.Attribute):
        parts.insert(0, base.attr)
        base = base.value
    if not isinstance(base, ast.Name) or base.id not in names:
        return None
    module, attr = names[base.id]
    obj: object = importlib.import_module(module)
    for part in ([attr] if attr else []) + parts:
        obj = getattr(obj, part)
    return obj


def _own_names(tree: ast.AST) -> set[str]:
    """Private names the module defines itself: functions, class attributes, ``self._x =``."""
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.AnnAssign | ast.Assign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for sub in ast.walk(t):
                    if (
                        isinstance(sub, ast.Attribute)
                        and isinstance(sub.value, ast.Name)
                        and sub.value.id in ("self", "cls")
                    ):
                        own.add(sub.attr)
    return own


def private_uses(source: str) -> list[str]:
    """Where ``source`` (one module) touches an Optuna private name, per the rules above."""
    tree = ast.parse(source)
    optuna_names = _optuna_names(tree)
    if optuna_names is None:
        return []
    own = _own_names(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "optuna":
            assert node.module is not None
            if any(_private(p) for p in node.module.split(".")) or any(
                _private(a.name) for a in node.names
            ):
                found.append(f"{line}: from {node.module} import ...")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "optuna" and any(_private(p) for p in parts):
                    found.append(f"{line}: import {alias.name}")
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            mine = isinstance(base, ast.Name) and base.id in ("self", "cls") and node.attr in own
            if not mine:
                found.append(f"{line}: {ast.unparse(base)}.{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in REFLECTION and len(node.args) >= 2:
                name = node.args[1]
                if isinstance(name, ast.Constant) and _private(str(name.value)):
                    found.append(f"{line}: {node.func.id}(..., {name.value!r})")
        elif isinstance(node, ast.ClassDef):
            bases = [b for b in (_optuna_base(b, optuna_names) for b in node.bases) if b]
            for item in node.body:
                overrides = any(hasattr(b, getattr(item, "name", "")) for b in bases)
                if isinstance(item, ast.FunctionDef) and _private(item.name) and overrides:
                    found.append(f"{item.lineno}: override of {node.name}.{item.name}")
    return found


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p != ADAPTER)


def test_only_the_adapter_touches_optuna_private_names() -> None:
    problems = [
        f"{path.relative_to(ROOT)}:{use}"
        for path in _modules()
        for use in private_uses(path.read_text())
    ]
    assert not problems, (
        "Optuna private names outside schedulers/optuna/internals.py (add a named function "
        "there and call it):\n" + "\n".join(problems)
    )


def test_the_adapter_exists_and_is_where_the_private_names_are() -> None:
    assert private_uses(ADAPTER.read_text()), "the rule finds nothing in the adapter itself"


@pytest.mark.parametrize(
    "source",
    [
        "import optuna\nx = study._storage",
        "from optuna.storages._rdb import models",
        "import optuna._gp.acqf",
        "from optuna.study import _is_constrained_optimization",
        "import optuna\ndef f(t):\n    return t._trial_id",
        "import optuna\ngetattr(storage, '_backend', storage)",
        "import optuna\nclass S(optuna.samplers.GPSampler):\n    def _sample_relative_impl(s):"
        "\n        pass",
        "from optuna.samplers import GPSampler\nclass S(GPSampler):\n    def f(self):\n"
        "        return super()._get_acqf_and_best_params()",
        "import optuna\nclass S(optuna.samplers.BaseSampler):\n    def f(self, study):\n"
        "        self._raise_error_if_multi_objective(study)",
    ],
)
def test_the_rule_catches(source: str) -> None:
    assert private_uses(source)


@pytest.mark.parametrize(
    "source",
    [
        "x = study._storage  # no optuna import: not an Optuna object",
        "import optuna\nclass A:\n    def __init__(self):\n        self._n = 1\n"
        "    def f(self):\n        return self._n + self._g()\n    def _g(self):\n        return 0",
        "import optuna\nclass A(optuna.samplers.BaseSampler):\n    def __init__(self):\n"
        "        self._seed = 1\n    def __repr__(self):\n        return str(self._seed)",
        "import optuna\nx = y.__class__",
    ],
)
def test_the_rule_lets_pass(source: str) -> None:
    assert not private_uses(source)
