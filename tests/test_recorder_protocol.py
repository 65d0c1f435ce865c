"""Every recorder satisfies the recorder protocol (``hyperfleet.spec.recorder.Recorder``): it
says so (subclasses it) and defines each of its methods with the protocol's parameters, so the
runtime calls them without probing."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from hyperfleet.platform.recorder import RankZeroRecorder
from hyperfleet.spec.recorder import Recorder
from hyperfleet.testing.launchers import QuietRecorder
from hyperfleet.trials.runtime import PrintRecorder

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hyperfleet"
IMPLEMENTATIONS = [RankZeroRecorder, PrintRecorder, QuietRecorder]
METHODS = ["__call__", "rewind", "finish", "pinned_steps", "note", "check"]


def _classes(root: Path) -> list[ast.ClassDef]:
    return [
        node
        for path in sorted(root.rglob("*.py"))
        if path != Path(__file__).resolve()  # its counter-example below is no recorder
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
    ]


def _methods(node: ast.ClassDef) -> set[str]:
    return {f.name for f in node.body if isinstance(f, ast.FunctionDef)}


def _protocol_methods() -> list[str]:
    return sorted(
        name
        for name, value in vars(Recorder).items()
        if callable(value) and (name == "__call__" or not name.startswith("_"))
    )


def test_the_protocol_is_the_methods_the_runtime_calls() -> None:
    assert _protocol_methods() == sorted(METHODS)


def test_every_recorder_class_in_the_package_is_checked() -> None:
    """A new class named ``...Recorder`` in ``hyperfleet/`` joins :data:`IMPLEMENTATIONS`."""
    found = {node.name for node in _classes(PACKAGE) if node.name.endswith("Recorder")}
    assert found - {"Recorder"} == {cls.__name__ for cls in IMPLEMENTATIONS}


def test_every_recorder_in_the_tests_and_benchmarks_declares_the_protocol() -> None:
    """A class with a recorder's methods anywhere in the repository subclasses ``Recorder``
    and defines all of its methods (the runtime calls each without asking)."""
    shaped = [
        node
        for root in (PACKAGE, ROOT / "tests", ROOT / "benchmarks")
        for node in _classes(root)
        if {"rewind", "finish"} <= _methods(node) and node.name != "Recorder"
    ]
    # the three in hyperfleet/, a test double, a benchmark's (others extend QuietRecorder)
    assert len(shaped) >= 5
    for node in shaped:
        bases = {ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases}
        assert "Recorder" in bases, f"{node.name} does not subclass Recorder"
        assert set(METHODS) <= _methods(node), (node.name, set(METHODS) - _methods(node))


@pytest.mark.parametrize("cls", IMPLEMENTATIONS, ids=lambda c: c.__name__)
def test_each_recorder_defines_every_method_of_the_protocol(cls: type) -> None:
    assert issubclass(cls, Recorder) and Recorder in cls.__mro__
    for name in METHODS:
        method = getattr(cls, name)
        assert method is not getattr(Recorder, name), f"{cls.__name__}.{name} is not defined"
        theirs = list(inspect.signature(method).parameters)
        assert theirs == list(inspect.signature(getattr(Recorder, name)).parameters), (
            cls.__name__,
            name,
        )


def test_the_recorders_without_storage_are_recorders_at_runtime() -> None:
    for recorder in (PrintRecorder(), QuietRecorder()):
        assert isinstance(recorder, Recorder)
        recorder.check()  # nothing supersedes a trial that has no storage
        assert recorder.pinned_steps() == set()

    class Partial:  # what the runtime used to probe for: a recorder without ``check``
        def __call__(self, step: int, metrics: object) -> None: ...
        def rewind(self, step: int, params: object, donor: int) -> None: ...
        def finish(self, outcome: str) -> None: ...
        def pinned_steps(self) -> None: ...
        def note(self, message: str, restart: bool = True) -> None: ...

    assert not isinstance(Partial(), Recorder)
