"""A script trial's failure line is its program's own last exception line: a program that
prints a traceback ending ``RuntimeError: loss diverged`` and exits 1 is recorded with that
line (not ``ScriptError: python t.py exited with code 1``), in its stored error, ``sweep run``'s
lines and ``sweep status``; it is retried once, then FAIL (the same error twice). A program
that exits without an exception is named by its exit code, as before (and the same exit code
twice is the same error twice)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperfleet.platform.storage import Storage, TrialRecord
from hyperfleet.platform.storage.results import reason
from hyperfleet.spec.states import TrialState
from hyperfleet.testing.sweeps import minimal_sweep
from tests.integration.cli import cli, invoke

pytestmark = pytest.mark.slow

DIVERGES = """\
import sys
print("step=1 loss=0.5", flush=True)
def train():
    raise RuntimeError("loss diverged")
if __name__ == "__main__":
    if sys.argv[1:] == ["quiet"]:
        print("no exception, just a bad exit", file=sys.stderr)
        sys.exit(3)
    train()
"""


def script_sweep(tmp_path: Path, mlflow_template: Path, *args: str) -> dict[str, Any]:
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(mlflow_template, runs / "mlflow.db")
    (tmp_path / "t.py").write_text(DIVERGES)
    return minimal_sweep(
        name="diverges",
        budget={"trials": 1, "max_concurrent": 1, "max_retries": 2},
        objective={"metric": "loss", "mode": "min"},
        trial={"workload": None, "command": ["python", "t.py", *args], "steps": 1},
        workdir=str(runs),
        storage=f"sqlite:///{runs / 'hf.db'}",
        tracking={"uri": f"sqlite:///{runs / 'mlflow.db'}", "log_model": False},
    )


def run(tmp_path: Path, data: dict[str, Any]) -> tuple[str, TrialRecord]:
    """``sweep run`` in ``tmp_path`` (exit 4: no trial COMPLETE); its output and the trial."""
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    proc = cli("sweep", "run", str(path), timeout=600, cwd=tmp_path)
    assert proc.returncode == 4, proc.stderr[-3000:]
    storage = Storage(data["storage"], create=False)
    try:
        (trial,) = storage.trials.of(data["name"])
    finally:
        storage.close()
    assert trial.state == TrialState.FAIL
    return proc.stdout + proc.stderr, trial


def test_the_programs_own_exception_is_the_failure_line(
    tmp_path: Path, mlflow_template: Path
) -> None:
    data = script_sweep(tmp_path, mlflow_template)
    output, trial = run(tmp_path, data)
    assert reason(trial.error) == "RuntimeError: loss diverged", trial.error
    assert trial.retries == 1, "retried once; the same error again is not retried"
    assert "trial 0 failed: RuntimeError: loss diverged" in output
    assert "the first, trial 0: RuntimeError: loss diverged" in output
    assert trial.error is not None and "t.py exited with code 1" in trial.error
    status = invoke("sweep", "status", "diverges", "--storage", data["storage"])
    assert "RuntimeError: loss diverged" in status.stdout


def test_a_program_without_an_exception_is_named_by_its_exit_code(
    tmp_path: Path, mlflow_template: Path
) -> None:
    data = script_sweep(tmp_path, mlflow_template, "quiet")
    output, trial = run(tmp_path, data)
    assert reason(trial.error) == "ScriptError: python t.py exited with code 3", trial.error
    assert "trial 0 failed: ScriptError: python t.py exited with code 3" in output
    assert trial.error is not None and "no exception, just a bad exit" in trial.error
    assert trial.retries == 1, "the same exit twice is the same error twice"
