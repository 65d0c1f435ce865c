"""Issue #50, values at the edges: bounds, ints and step counts the samplers or the storage
can't hold are refused by ``validate`` and ``sweep run`` with one line naming the field and
the fix, exit 2, and nothing written, so the sweep's name stays free and the corrected file
runs. Before, they passed ``validate`` and ``sweep run`` crashed with an OverflowError,
leaving the sweep "done 0/1" (or "created") under its name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import deep_update
from tests.faults.conftest import fault_sweep
from tests.faults.test_input import refused, refused_here, write_sweep
from tests.integration.cli import cli

# (case, changes to the fault sweep (a space given replaces the sweep's), the start of the line)
EDGES: list[tuple[str, dict[str, Any], str]] = [
    (
        "float-width-overflows",
        {"space": {"x": {"type": "float", "low": -1.0e308, "high": 1.0e308}}},
        "error: space.x: high - low overflows a float",
    ),
    (
        "float-step-count-overflows",
        {"space": {"x": {"type": "float", "low": 0.0, "high": 1.0e300, "step": 1.0e-300}}},
        "error: space.x.step: (high - low) / step overflows",
    ),
    (
        "int-beyond-2-53",
        {"space": {"x": {"type": "int", "low": 0, "high": 10**30}}},
        "error: space.x.high: 1000000000000000000000000000000 is beyond",
    ),
    (
        "int-low-beyond-2-53",
        {"space": {"x": {"type": "int", "low": -(2**53) - 2, "high": 0}}},
        "error: space.x.low: -9007199254740994 is beyond",
    ),
    (
        "gp-int-values-beyond-2-24",
        {
            "scheduler": {"type": "gp", "seed": 0},
            "space": {"x": {"type": "int", "low": 1, "high": 2**40, "log": True}},
        },
        "error: space.x: 1099511627776 values, which scheduler 'gp' enumerates",
    ),
    (
        "grid-stepped-float-values-beyond-2-24",
        {
            "scheduler": {"type": "grid"},
            "space": {"x": {"type": "float", "low": 0.0, "high": 1.0, "step": 1.0e-9}},
        },
        "error: space.x: 1000000001 values, which scheduler 'grid' enumerates",
    ),
    (
        "steps-beyond-int32",
        {"trial": {"steps": 2**31}},
        "error: trial.steps: 2147483648 is beyond the storage's step column",
    ),
    (
        "eval-every-beyond-int32",
        {"trial": {"eval_every": 2**31}},
        "error: trial.eval_every: 2147483648 is beyond the storage's step column",
    ),
]


@pytest.mark.parametrize(("case", "changes", "start"), EDGES, ids=[c[0] for c in EDGES])
def test_edge_values_are_one_line_exit_2_and_nothing_written(
    case: str, changes: dict[str, Any], start: str, tmp_path: Path
) -> None:
    data = deep_update(fault_sweep(tmp_path), changes)
    data.update({k: v for k, v in changes.items() if k in ("space", "scheduler")})
    path = write_sweep(tmp_path, data)
    first = case == EDGES[0][0]  # one case from a real process, the others in this one
    for command in (("validate",), ("sweep", "run")):
        (refused if first else refused_here)(tmp_path, *command, str(path), start=start)


def test_the_largest_values_that_fit_still_validate(tmp_path: Path) -> None:
    """The limits are the edges, not below them: 2**53 and 1e307-wide ranges are fine."""
    for changes in (
        {"space": {"x": {"type": "float", "low": -1.0e307, "high": 1.0e307}}},
        {"space": {"x": {"type": "int", "low": -(2**53), "high": 2**53}}},
        {"trial": {"steps": 2**31 - 1, "eval_every": 2**31 - 1}},
    ):
        data = deep_update(fault_sweep(tmp_path), changes)
        data.update({k: v for k, v in changes.items() if k == "space"})
        result = cli("validate", str(write_sweep(tmp_path, data)), cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.slow
def test_a_refused_edge_leaves_the_name_free_for_the_corrected_file(
    tmp_path: Path, db_url: str
) -> None:
    data = fault_sweep(tmp_path)
    data["storage"] = db_url
    data["space"] = {"x": {"type": "float", "low": -1.0e308, "high": 1.0e308}}
    path = write_sweep(tmp_path, data)
    refused(tmp_path, "sweep", "run", str(path), start="error: space.x: high - low overflows")
    data["space"] = {"x": {"type": "float", "low": -1.0, "high": 1.0}}
    data["budget"] = {"trials": 1, "max_concurrent": 1}
    result = cli("sweep", "run", str(write_sweep(tmp_path, data)), cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    listed = cli("sweep", "list", "--storage", data["storage"], cwd=tmp_path)
    assert "1/1" in listed.stdout, listed.stdout
