"""``hyperfleet.testing`` as its users meet it: ``minimal_sweep`` validates and merges as its
docstring says, the controller harness's example runs, and nothing outside the package and
the tests depends on it or on pytest."""

from __future__ import annotations

import ast
from pathlib import Path

from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.launcher.simulated import curve
from hyperfleet.testing.controller import Sim
from hyperfleet.testing.sweeps import MINIMAL_SWEEP, minimal_sweep

PACKAGE = Path(__file__).resolve().parents[2] / "hyperfleet"


def test_the_minimal_sweep_is_valid_and_left_unchanged_by_its_overrides() -> None:
    assert parse_sweep(minimal_sweep()).name == "minimal"
    data = minimal_sweep(name="crashy", budget={"trials": 3}, trial={"params": {"a": 1}})
    assert data["budget"] == {"trials": 3, "max_concurrent": 2}
    assert data["trial"]["params"] == {"a": 1} and data["trial"]["steps"] == 4
    assert "params" not in MINIMAL_SWEEP["trial"] and MINIMAL_SWEEP["budget"]["trials"] == 2
    cfg = parse_sweep(data)
    assert cfg.budget.trials == 3 and cfg.trial.params == {"a": 1}


def test_space_and_scheduler_are_replaced_whole() -> None:
    space = {"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True}}
    data = minimal_sweep(space=space, scheduler={"type": "grid"})
    assert data["space"] == space and data["scheduler"] == {"type": "grid"}


def test_the_controller_harness_example_runs(tmp_path: Path) -> None:
    script = curve(lambda params, step: float(params["x"]) / step, steps=10)
    sim = Sim(tmp_path, script, {"budget": {"trials": 4, "max_concurrent": 2}})
    summary = sim.run(sim.controller())
    assert summary.state_counts["COMPLETE"] == 4 and sim.max_running == 2


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_only_tests_import_the_testing_package_or_pytest() -> None:
    bad = {
        str(p.relative_to(PACKAGE)): sorted(
            m
            for m in _imports(p)
            if m.split(".")[0] == "pytest" or m.startswith("hyperfleet.testing")
        )
        for p in PACKAGE.rglob("*.py")
        if "testing" not in p.relative_to(PACKAGE).parts
    }
    assert not {p: m for p, m in bad.items() if m}
