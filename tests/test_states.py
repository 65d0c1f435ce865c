"""Stored states are spelled once, in :mod:`hyperfleet.spec.states`.

Read from the source with ``ast``: outside that module no string constant is a trial state's
name (``"RUNNING"``, ``"PAUSED"``, ...; docstrings aside), and no stored state or status is
compared with, or passed as, a string: ``x.state == "open"``, ``status="done"``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from hyperfleet.spec.states import (
    GangState,
    MemberState,
    Outcome,
    SweepStatus,
    TrialState,
    WorkerState,
)

PACKAGE = Path(__file__).resolve().parents[1] / "hyperfleet"
HOME = PACKAGE / "spec" / "states.py"
TRIAL_STATES = {s.value for s in TrialState}
STORED = TRIAL_STATES | {
    s.value for enum in (GangState, MemberState, Outcome, SweepStatus, WorkerState) for s in enum
}
FIELDS = {
    "state",
    "status",
    "stored",
    "outcome",
}  # attributes and keywords that hold a stored state


def _docstrings(tree: ast.AST) -> set[int]:
    """``id``s of the module's, classes' and functions' docstring constants (and of the
    attribute docstrings that follow an assignment)."""
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for stmt in body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                out.add(id(stmt.value))
    return out


def _strings(node: ast.AST) -> Iterator[ast.Constant]:
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            yield n


def _field(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr in FIELDS) or (
        isinstance(node, ast.Name) and node.id in FIELDS
    )


def _problems(path: Path, root: Path = PACKAGE.parent) -> Iterator[str]:
    tree = ast.parse(path.read_text())
    skip = _docstrings(tree)
    where = path.relative_to(root)
    for const in _strings(tree):
        if const.value in TRIAL_STATES and id(const) not in skip:
            yield f"{where}:{const.lineno}: {const.value!r}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(map(_field, [node.left, *node.comparators])):
            for const in _strings(node):
                if const.value in STORED:
                    yield f"{where}:{const.lineno}: compared with {const.value!r}"
        elif isinstance(node, ast.keyword) and node.arg in FIELDS:
            for const in _strings(node.value):
                if const.value in STORED:
                    yield f"{where}:{const.lineno}: {node.arg}={const.value!r}"


def test_no_state_literal_outside_the_enums_module() -> None:
    found = [p for path in sorted(PACKAGE.rglob("*.py")) if path != HOME for p in _problems(path)]
    found = sorted(set(found), key=found.index)
    assert found == [], "use the enums of hyperfleet.spec.states:\n" + "\n".join(found)


def test_the_check_finds_a_literal(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        '"""RUNNING in a docstring is prose."""\n'
        'x = t.state == "RUNNING"\n'
        'store.set(status="done")\n'
        'ok = ("running", "stopped")\n'
    )
    found = list(_problems(bad, tmp_path))
    assert [f.split(": ", 1)[1] for f in found] == [
        "'RUNNING'",
        "compared with 'RUNNING'",
        "status='done'",
    ]


def test_every_stored_value_is_distinct_within_its_enum() -> None:
    for enum in (TrialState, Outcome, SweepStatus, WorkerState, GangState, MemberState):
        assert len({s.value for s in enum}) == len(enum)
    assert TrialState.RUNNING == "RUNNING" and f"{TrialState.PAUSED}" == "PAUSED"
