"""Issue #26, finding 3: bad values are refused before anything is kept.

Real ``hyperfleet sweep run`` processes and trial processes running
``tests/faults/values_workloads.py``: a report of a string, ``None`` or ``10**400`` fails its
trial before the report's checkpoint is written (so no retry resumes past it); a report from a
thread after ``main`` returned changes nothing of the finished trial (storage, Optuna and
MLflow agree); a ``numpy.float64`` in a checkpoint is converted so the resume works;
``sys.exit(0)`` fails the trial naming ``SystemExit``, in-process and under torchrun. Each
test checks the fault suite's invariants (budget, states, no process left, no step reported
twice).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest
from mlflow.tracking import MlflowClient

from hyperfleet.platform.storage import Storage
from hyperfleet.platform.tracking.artifacts import line_tail
from tests.conftest import deep_update
from tests.faults.conftest import Fault
from tests.integration.cli import cli

FaultMaker = Callable[..., Fault]
WORKLOAD = "tests.faults.values_workloads:main"


def values_fault(fault: FaultMaker, mode: str, changes: dict[str, Any]) -> Fault:
    """A fault sweep of ``values_workloads`` in ``mode``, with ``changes`` on top."""
    return fault(deep_update({"trial": {"workload": WORKLOAD, "params": {"mode": mode}}}, changes))


def mlflow_steps(f: Fault, run_id: str) -> list[tuple[int, float]]:
    client = MlflowClient(tracking_uri=str(f.data["tracking"]["uri"]))
    return [(m.step, m.value) for m in client.get_metric_history(run_id, "loss")]


def test_a_bad_value_fails_its_trial_before_its_checkpoint_is_kept(fault: FaultMaker) -> None:
    f = values_fault(fault, "bad_value", {
        "budget": {"trials": 4, "max_concurrent": 2, "max_retries": 1},
        "trial": {"steps": 3, "params": {"bad": [0, 1, 2]}},
    })  # fmt: skip
    result = f.run()
    assert result.returncode == 0, result.stderr[-3000:]
    trials = f.trials()
    said = {
        0: "metric 'loss' is a str ('abc'), not a real number",
        1: "metric 'loss' is a NoneType (None), not a real number",
        2: "metric 'loss' is an int too large for a float (an int of 401 digits)",
    }
    froms = {}
    for number, words in said.items():
        t = trials[number]
        assert t.state == "FAIL", (number, t.state, t.error)
        assert f"ReportValueError: ctx.report(step 2): {words}" in (t.error or ""), t.error
        assert t.last_step == 1 and t.retries == 1, "retried once, and refused again"
        assert not (Path(t.trial_dir) / "checkpoints" / "step-000000002.pt").exists()
        assert [s for s, _ in mlflow_steps(f, t.mlflow_run_id)] == [1]
        froms[number] = sorted(int(v) for n, _, v in f.marks.events("from") if n == number)
    assert froms == {0: [0, 1], 1: [0, 1], 2: [0, 1]}, "the retry resumed from step 1"
    assert trials[3].state == "COMPLETE"
    f.check_clean(budget=4)


@pytest.mark.slow
@pytest.mark.long  # the rule's in-process case is in make test; this is its torchrun variant
def test_a_bad_value_under_torchrun_fails_every_rank_together(fault: FaultMaker) -> None:
    f = values_fault(fault, "bad_value", {
        "budget": {"trials": 2, "max_concurrent": 1, "max_retries": 0},
        "trial": {"steps": 3, "resources": {"devices": 2}, "parallel": {"data": 2},
                  "timeout": "120s", "params": {"bad": [0]}},
    })  # fmt: skip
    result = f.run()
    assert result.returncode == 0, result.stderr[-3000:]
    trials = f.trials()
    t = trials[0]
    assert t.state == "FAIL" and t.last_step == 1, t.error
    words = "ReportValueError: ctx.report(step 2): metric 'loss' is a str ('abc')"
    assert words in (t.error or "") and "timed out" not in (t.error or ""), t.error
    assert "rank 0 could not record" not in (t.error or ""), "rank 1 raised the same refusal"
    assert not (Path(t.trial_dir) / "checkpoints" / "step-000000002.pt").exists()
    assert trials[1].state == "COMPLETE"
    f.check_clean(budget=2)


def test_a_report_after_main_returned_changes_nothing(fault: FaultMaker) -> None:
    f = values_fault(fault, "late", {
        "budget": {"trials": 2, "max_concurrent": 1},
        "trial": {"steps": 3, "params": {"step_s": 0.15}},
    })  # fmt: skip
    result = f.run()
    assert result.returncode == 0, result.stderr[-3000:]
    storage = Storage(f.storage, create=False)
    try:
        study = optuna.load_study(study_name=str(f.data["name"]), storage=storage.optuna)
    finally:
        storage.close()
    client = MlflowClient(tracking_uri=str(f.data["tracking"]["uri"]))
    for number, t in f.trials().items():
        assert t.state == "COMPLETE" and t.last_step == 3
        stored = t.metrics["loss"]
        final = client.get_run(t.mlflow_run_id).data.metrics["final/loss"]
        assert (
            stored == study.trials[number].value == final == mlflow_steps(f, t.mlflow_run_id)[-1][1]
        )
        assert stored != 999.0
        assert not (Path(t.trial_dir) / "checkpoints" / "step-000000004.pt").exists()
    status = cli("sweep", "status", str(f.data["name"]), "--storage", f.storage, "--json")
    best = json.loads(status.stdout)["best"]
    assert best["value"] == min(t.metrics["loss"] for t in f.trials().values())
    late = {n: v for n, _, v in f.marks.events("late")}
    assert late[0] == "4 returned", "trial 0's thread reported while trial 1 ran, and was refused"
    f.check_clean(budget=2)


def test_numpy_values_in_a_checkpoint_are_converted_and_the_resume_works(
    fault: FaultMaker,
) -> None:
    f = values_fault(fault, "numpy", {
        "budget": {"trials": 1, "max_concurrent": 1, "max_retries": 1},
        "trial": {"steps": 4},
    })  # fmt: skip
    result = f.run()
    assert result.returncode == 0, result.stderr[-3000:]
    t = f.trials()[0]
    assert t.state == "COMPLETE" and t.retries == 1, t.error
    assert [int(v) for _, _, v in f.marks.events("from")] == [0, 2]
    assert [v for _, _, v in f.marks.events("resumed")] == ["float,Tensor"]
    assert "UnpicklingError" not in Path(t.log_path).read_text()
    f.check_clean(budget=1)


def test_a_failure_reason_holds_no_terminal_escape_codes(fault: FaultMaker) -> None:
    f = values_fault(fault, "legacy", {
        "budget": {"trials": 2, "max_concurrent": 2, "max_retries": 1},
        "trial": {"steps": 3, "params": {"bad": [0]}},
    })  # fmt: skip
    result = f.run()
    assert result.returncode == 0, result.stderr[-3000:]
    t = f.trials()[0]
    error = t.error or ""
    assert t.state == "FAIL" and "UnpicklingError: Weights only load failed" in error, error
    assert "do those steps only if you trust the source" in error  # the words torch made bold
    assert "\x1b" not in error and "\x9b" not in error
    client = MlflowClient(tracking_uri=str(f.data["tracking"]["uri"]))
    tag = client.get_run(t.mlflow_run_id).data.tags["hyperfleet.error"]
    assert tag == line_tail(error, 4000), "the error's last whole lines"
    assert "\x1b" in Path(t.log_path).read_text(), "the log itself keeps what the trial wrote"
    assert f.trials()[1].state == "COMPLETE"
    f.check_clean(budget=2)


def _sys_exit(fault: FaultMaker, devices: int) -> None:
    f = values_fault(fault, "exit", {
        "budget": {"trials": 2, "max_concurrent": 1, "max_retries": 0},
        "trial": {"steps": 3, "resources": {"devices": devices}, "params": {"bad": [0]},
                  "parallel": {"data": max(devices, 1)}},
    })  # fmt: skip
    result = f.run()
    assert result.returncode == 0, result.stderr[-3000:]
    trials = f.trials()
    assert trials[0].state == "FAIL" and trials[0].last_step == 2
    words = "the workload called sys.exit(0) (SystemExit) at step 2; a workload returns instead"
    assert f"WorkloadExitError: {words}" in (trials[0].error or ""), trials[0].error
    assert "\x1b" not in (trials[0].error or "")
    assert trials[1].state == "COMPLETE"
    f.check_clean(budget=2)


def test_sys_exit_in_an_in_process_workload_fails_naming_system_exit(fault: FaultMaker) -> None:
    _sys_exit(fault, 0)


@pytest.mark.slow
@pytest.mark.long
def test_sys_exit_under_torchrun_fails_naming_system_exit_on_every_rank(
    fault: FaultMaker,
) -> None:
    _sys_exit(fault, 2)
