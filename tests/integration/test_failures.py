"""A crashing trial ends FAIL with its error kept and shown; the sweep goes on."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from hyperfleet.testing.sweeps import minimal_sweep
from tests.integration.cli import cli, invoke

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_crashing_trial_is_fail_with_error_tail(
    sweep_file: Callable[..., Path], tmp_path: Path
) -> None:
    path = sweep_file(
        minimal_sweep(
            name="crashy",
            scheduler={"type": "random", "seed": 1},
            budget={"trials": 3},
            trial={
                "params": {"fail_first": True},
                "eval_every": 2,
                "resources": {"devices": 1},
                "parallel": {"data": 1},
            },
        )
    )
    # a custom workload without declared params accepts any names
    proc = cli("sweep", "run", str(path), "--json", "--devices", "cpu:2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["state_counts"] == {"COMPLETE": 2, "PRUNED": 0, "FAIL": 1}
    assert "trial 0 failed: RuntimeError: injected failure in trial 0" in proc.stderr
    status = invoke(
        "sweep", "status", "crashy", "--storage", f"sqlite:///{tmp_path / 'runs' / 'hf.db'}"
    )
    assert status.exit_code == 0, status.output
    assert "trial 0 failed" in status.stdout
    assert "RuntimeError: injected failure in trial 0" in status.stdout


def test_unknown_sweep_status_is_one_line(tmp_path: Path) -> None:
    from hyperfleet.platform.storage import Storage

    missing = tmp_path / "typo" / "x.db"
    result = invoke("sweep", "status", "nope", "--storage", f"sqlite:///{missing}")
    assert result.exit_code == 2
    assert result.stderr.strip().startswith("error: storage: no database at")
    assert len(result.stderr.strip().splitlines()) == 1
    assert not missing.parent.exists(), "a reader creates nothing"
    Storage(f"sqlite:///{tmp_path / 'x.db'}").close()
    result = invoke("sweep", "status", "nope", "--storage", f"sqlite:///{tmp_path / 'x.db'}")
    assert result.exit_code == 2
    assert result.stderr.strip().startswith("error: sweep: no sweep named 'nope'")
    assert len(result.stderr.strip().splitlines()) == 1
