"""One home per default: each default value or shared constant is written once in
``hyperfleet/``, beside its owner, and every other module imports it.

The package is parsed with ``ast``: docstrings and comments do not count, string constants,
numbers and the shapes below do. A failure names every place the literal stands; keep the one
in its home and import the name there instead of writing the value again.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hyperfleet"

#: string defaults: the literal -> the module that owns it (exact match, or contained in any
#: string where ``contained``: a URL built around it counts too)
STRINGS = {
    "hyperfleet-runs": ("hyperfleet/platform/urls.py", True),  # DEFAULT_WORKDIR
    "hyperfleet.db": ("hyperfleet/platform/urls.py", True),  # STORAGE_FILE (local_storage)
    "mlflow.db": ("hyperfleet/platform/urls.py", True),  # TRACKING_FILE (local_tracking)
    "spec.json": ("hyperfleet/spec/wire.py", False),  # SPEC_FILE
    "log.txt": ("hyperfleet/spec/wire.py", False),  # LOG_FILE
    ".hyperfleet-sweep.json": ("hyperfleet/platform/storage/ownership.py", False),  # MARKER
    "hyperfleet-stack": ("hyperfleet/platform/services/__init__.py", False),  # DEFAULT_STATE
}

#: numeric defaults: value -> home (their literals in ``hyperfleet/platform``)
NUMBERS = {
    30.0: "hyperfleet/platform/clock.py",  # STALE_AFTER_S
    15432: "hyperfleet/platform/services/__init__.py",  # PORTS
    15000: "hyperfleet/platform/services/__init__.py",
    18501: "hyperfleet/platform/services/__init__.py",
}

#: parameters and fields whose default is a shared constant, never a number written again
TIMING_NAMES = {"stale_after", "heartbeat_every", "heartbeat_timeout_s", "grace", "stop_grace"}


def _docstrings(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


@functools.cache
def _nodes() -> list[tuple[str, ast.AST]]:
    """``(path, node)`` for every node of every module of the package, docstrings left out."""
    found: list[tuple[str, ast.AST]] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        skip = _docstrings(tree)
        rel = path.relative_to(ROOT).as_posix()
        found += [(rel, node) for node in ast.walk(tree) if id(node) not in skip]
    return found


def _places(match: Callable[[ast.AST], bool], under: str = "hyperfleet/") -> list[str]:
    return [
        f"{path}:{getattr(node, 'lineno', 0)}"
        for path, node in _nodes()
        if path.startswith(under) and match(node)
    ]


def _string(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


@pytest.mark.parametrize("literal", sorted(STRINGS))
def test_string_default_has_one_home(literal: str) -> None:
    home, contained = STRINGS[literal]

    def match(node: ast.AST) -> bool:
        value = _string(node)
        if value is None:
            return False
        return literal in value if contained else value == literal

    places = _places(match)
    assert len(places) == 1 and places[0].startswith(home + ":"), (
        f"{literal!r} belongs in {home} only, found at {places}"
    )


@pytest.mark.parametrize("value", sorted(NUMBERS))
def test_numeric_default_has_one_home(value: float) -> None:
    home = NUMBERS[value]

    def match(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Constant)
            and type(node.value) is type(value)
            and node.value == value
        )

    places = _places(match, "hyperfleet/platform/")
    assert len(places) == 1 and places[0].startswith(home + ":"), (
        f"{value!r} belongs in {home} only, found at {places}"
    )


def test_timing_defaults_are_the_shared_constants() -> None:
    """Heartbeat, staleness and stop-grace defaults come from ``clock.HEARTBEAT_EVERY_S``,
    ``clock.STALE_AFTER_S`` and ``launcher.base.STOP_GRACE_S``; the CLI's duration strings
    are made from them."""

    def numeric_default(node: ast.AST) -> bool:
        pairs: list[tuple[str, ast.expr | None]] = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args.posonlyargs + node.args.args
            pairs += zip([a.arg for a in args[len(args) - len(node.args.defaults) :]],
                         node.args.defaults, strict=True)  # fmt: skip
            pairs += [(a.arg, d) for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults,
                                                 strict=True)]  # fmt: skip
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            pairs.append((node.target.id, node.value))
        return any(
            name in TIMING_NAMES
            and isinstance(value, ast.Constant)
            and type(value.value) in (int, float)
            and value.value != 0  # a handle with no process to stop waits for nothing
            for name, value in pairs
        )

    assert not _places(numeric_default)
    assert not _places(lambda n: _string(n) in ("3s", "30s", "10s"))


def test_population_types_have_one_home() -> None:
    """``("pbt", "pb2")``: ``config.schedulers.POPULATION_TYPES`` (``SweepConfig.is_population``
    for a parsed config)."""

    def match(node: ast.AST) -> bool:
        if not isinstance(node, ast.Tuple | ast.List | ast.Set):
            return False
        return {_string(e) for e in node.elts} == {"pbt", "pb2"}

    places = _places(match)
    assert places == [p for p in places if p.startswith("hyperfleet/platform/config/schedulers.py")]
    assert len(places) == 1, places


def test_objectives_fallback_has_one_home() -> None:
    """``objectives or [objective]``: ``SweepConfig.all_objectives`` alone (stored configs are
    read parsed, through ``SweepRecord.config``) — no dict reading of either key elsewhere."""

    def match(node: ast.AST) -> bool:
        if not isinstance(node, ast.BoolOp) or not isinstance(node.op, ast.Or):
            return False
        first, rest = node.values[0], node.values[1:]
        return "objectives" in ast.unparse(first) and any(
            isinstance(v, ast.List) and "objective" in ast.unparse(v) for v in rest
        )

    assert _places(match) == []  # all_objectives spells it with a conditional expression


def test_default_urls_are_built_in_one_place() -> None:
    """``<workdir>/hyperfleet.db`` and ``<workdir>/mlflow.db`` are built only by
    ``urls.local_storage`` and ``urls.local_tracking``."""
    from hyperfleet.platform.urls import DEFAULT_STORAGE, local_storage, local_tracking

    assert DEFAULT_STORAGE == "sqlite:///hyperfleet-runs/hyperfleet.db"
    assert local_tracking("w") == "sqlite:///w/mlflow.db"
    assert local_storage("/a/b") == "sqlite:////a/b/hyperfleet.db"


def test_storage_retry_default_has_one_home() -> None:
    """How long a storage outage is ridden out: ``storage/retry.py``'s ``DEFAULT_RETRY_S`` is
    also the sweep file's ``storage_retry`` default, imported, not written again in config/
    (``tracking/client.py``'s MLflow wait is another default of the same value)."""
    from hyperfleet.platform.config.model import SweepConfig
    from hyperfleet.platform.storage.retry import DEFAULT_RETRY_S

    assert SweepConfig.model_fields["storage_retry"].default == DEFAULT_RETRY_S

    def match(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Constant)
            and type(node.value) is float
            and (node.value == DEFAULT_RETRY_S)
        )

    assert _places(match, "hyperfleet/platform/config/") == []


def test_stack_defaults_have_one_home() -> None:
    """``hyperfleet stack up``'s address and worker count default to the stack's own
    (``services/__init__.py``: ``DEFAULT_ADDRESS``, ``DEFAULT_WORKERS``)."""
    import inspect

    from hyperfleet.platform.cli.stack import stack_up
    from hyperfleet.platform.services import DEFAULT_ADDRESS, DEFAULT_WORKERS
    from hyperfleet.platform.services.stack import StackConfig

    options = inspect.signature(stack_up).parameters
    config = StackConfig.__dataclass_fields__
    assert options["address"].default == config["address"].default == DEFAULT_ADDRESS
    assert options["workers"].default == config["workers"].default == DEFAULT_WORKERS
    tree = ast.parse((PACKAGE / "platform/cli/stack.py").read_text())
    defaults = [
        d for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) for d in f.args.defaults
    ]
    written = [d.value for d in defaults if isinstance(d, ast.Constant)]
    assert not [v for v in written if isinstance(v, int | str) and not isinstance(v, bool)]


def test_skopt_sampler_takes_its_acquisition_default_from_the_sweep_file() -> None:
    """``SkoptSampler()`` built by hand acquires as a sweep file's ``scheduler: {type: skopt}``
    does (``SkoptConfig.acq_func``)."""
    import inspect

    from hyperfleet.platform.config.schedulers import SkoptConfig
    from hyperfleet.platform.schedulers.optuna.skopt_sampler import SkoptSampler

    default = inspect.signature(SkoptSampler).parameters["acq_func"].default
    assert default == SkoptConfig(type="skopt").acq_func == "gp_hedge"
