"""Failures that repeat are not paid for again, through real trial processes: a workload's
deterministic error is retried once (its second launch raises the same exception, type and
message: FAIL), a sweep whose first trials all fail alike stops with that cause (``sweep
run`` exits 6 saying it, ``sweep status`` says it, ``hyperfleet.run`` raises
``SweepStoppedError`` naming it), and each trial's reason is the workload's own exception
line, in-process and under torchrun alike. The setting is validated like any other."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

import hyperfleet
from hyperfleet.errors import ConfigError
from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.storage import Storage, TrialRecord
from hyperfleet.platform.storage.results import reason
from hyperfleet.spec.states import TrialState
from hyperfleet.testing.sweeps import deep_update, minimal_sweep
from tests.integration.cli import cli, invoke


def stopped(n: int) -> str:
    return (
        f"stopped: its first {n} trials failed alike with KeyError: 'lr' "
        f"(budget.stop_after_alike_failures: {n}; fix the cause, then run a new sweep, or this "
        f"one again with budget.stop_after_alike_failures: 0)"
    )


def missing_lr(ctx: Any) -> None:
    """Reports step 1 with a checkpoint, then reads a param the space does not have: the same
    ``KeyError: 'lr'`` at every launch, resumed from its checkpoint or not."""
    state = ctx.load_checkpoint()
    if state is None:
        ctx.report(1, {"loss": 1.0}, checkpoint={"step": 1})
    print(ctx.params["lr"])


def notebook_cell() -> Any:
    """``missing_lr`` as a notebook defines it: a function no trial process can import (it
    travels by value)."""

    def train(ctx: Any) -> None:
        missing_lr(ctx)

    return train


def sweep_data(tmp_path: Path, mlflow_template: Path, **changes: Any) -> dict[str, Any]:
    runs = tmp_path / "runs"
    runs.mkdir(exist_ok=True)
    shutil.copy(mlflow_template, runs / "mlflow.db")
    base = minimal_sweep(
        name="alike",
        budget={"trials": 6, "max_concurrent": 1, "max_retries": 2},
        trial={"steps": 2},
        workdir=str(runs),
        storage=f"sqlite:///{runs / 'hf.db'}",
        tracking={"uri": f"sqlite:///{runs / 'mlflow.db'}", "log_model": False},
    )
    return deep_update(base, changes)


def stored(data: dict[str, Any]) -> list[TrialRecord]:
    storage = Storage(data["storage"], create=False)
    try:
        return storage.trials.of(data["name"])
    finally:
        storage.close()


def assert_failed_alike_once_retried(trials: list[TrialRecord], n: int) -> None:
    """``n`` trials, each FAIL with the workload's own line after one retry (not two)."""
    assert [t.state for t in trials] == [TrialState.FAIL] * n, [t.state for t in trials]
    for t in trials:
        assert reason(t.error) == "KeyError: 'lr'", t.error
        assert t.retries == 1, f"trial {t.number} relaunched {t.retries} times"
        assert t.error is not None and t.error.startswith("raised the same error twice")


@pytest.mark.slow
def test_a_notebook_sweep_that_fails_alike_raises_with_the_cause(
    tmp_path: Path, mlflow_template: Path
) -> None:
    data = sweep_data(tmp_path, mlflow_template)
    del data["trial"]["workload"]
    with pytest.raises(hyperfleet.SweepStoppedError) as raised:
        hyperfleet.run(data, notebook_cell(), progress=False)
    assert str(raised.value) == f"sweep 'alike' {stopped(3)}"
    assert raised.value.cause == "KeyError: 'lr'"
    assert len(raised.value.result.trials) == 3  # type: ignore[attr-defined]
    assert_failed_alike_once_retried(stored(data), 3)


@pytest.mark.slow
def test_sweep_run_stops_exits_6_and_status_says_why(tmp_path: Path, mlflow_template: Path) -> None:
    """Function trials of two ranks under torchrun (a warm group on two CPU devices), whose
    agent ends the log with its ``ChildFailedError`` table; two alike failures stop it."""
    data = sweep_data(
        tmp_path, mlflow_template,
        budget={"stop_after_alike_failures": 2},
        trial={"workload": f"{__name__}:missing_lr", "resources": {"devices": 2},
               "parallel": {"data": 2}},
    )  # fmt: skip
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    proc = cli("sweep", "run", str(path), "--devices", "cpu:2", "--json", timeout=600)
    assert proc.returncode == 6, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == f"error: sweep alike {stopped(2)}"
    assert json.loads(proc.stdout.strip().splitlines()[-1])["stopped"] == stopped(2)
    for number in range(2):
        assert f"trial {number} failed: KeyError: 'lr'" in proc.stderr
    assert_failed_alike_once_retried(stored(data), 2)

    status = invoke("sweep", "status", "alike", "--storage", data["storage"])
    assert status.exit_code == 0, status.stdout
    assert stopped(2) in " ".join(status.stdout.split())


@pytest.mark.parametrize(
    ("value", "expected"),
    [(-1, "greater than or equal to 0"), ("three", "valid integer")],
)
def test_the_setting_is_validated(value: object, expected: str, tmp_path: Path) -> None:
    data = minimal_sweep(budget={"stop_after_alike_failures": value})
    with pytest.raises(ConfigError) as bad:
        parse_sweep(data)
    (line,) = bad.value.problems
    assert line.startswith("budget.stop_after_alike_failures:") and expected in line, line
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    result = invoke("validate", str(path))
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "budget.stop_after_alike_failures" in result.stderr


def test_the_default_is_three_and_zero_turns_it_off() -> None:
    assert parse_sweep(minimal_sweep()).budget.stop_after_alike_failures == 3
    off = parse_sweep(minimal_sweep(budget={"stop_after_alike_failures": 0}))
    assert off.budget.stop_after_alike_failures == 0
