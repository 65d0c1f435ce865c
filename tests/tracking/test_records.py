"""What the runs say, as data: names, params, states, best and Pareto marks."""

from __future__ import annotations

from pathlib import Path

from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.tracking.artifacts import TAG_LIMIT, failure_note, line_tail
from hyperfleet.platform.tracking.records import (
    STATUS,
    Done,
    best,
    child_params,
    describe_space,
    parent_params,
    parent_series,
    pareto,
    run_name,
    state_counts,
    sweep_note,
)
from tests.conftest import BASE_SWEEP


def test_run_names_carry_the_sampled_values() -> None:
    assert run_name(7, {"lr": 0.0123456, "hidden": 48}) == "trial-0007 lr=0.01235 hidden=48"
    assert run_name(3, {"trial.precision": "bf16"}) == "trial-0003 precision=bf16"
    assert run_name(12) == "trial-0012"
    long = run_name(1, {f"p{i}": 0.123456 for i in range(100)})
    assert len(long) <= 254 and long.endswith(" ...")


def test_params_are_the_workload_params_and_sampled_knobs_only() -> None:
    params = {"lr": 0.01, "hidden": 64, "act": "relu"}
    out = child_params(params, {"trial.precision": "bf16"})
    assert out == {"lr": "0.01", "hidden": "64", "act": "relu", "trial.precision": "bf16"}


def test_the_sweep_run_has_space_objective_scheduler_and_budget() -> None:
    params = parent_params(parse_sweep(BASE_SWEEP))
    assert params["space.lr"] == "float [0.003, 0.03] log"
    assert params["space.hidden"] == "int [32, 64]"
    assert params["objective"] == "val_accuracy (max)"
    assert params["scheduler"] == "tpe" and params["scheduler.seed"] == "0"
    assert params["budget.trials"] == "2" and params["budget.max_concurrent"] == "2"
    assert params["workload"] == "digits" and params["fixed.batch_size"] == "64"
    assert not any(k.startswith("trial.comm") for k in params)  # no system settings at defaults
    assert describe_space({"type": "categorical", "choices": ["relu", "gelu"]}) == (
        "one of [relu, gelu]"
    )
    assert describe_space({"type": "int", "low": 16, "high": 256, "step": 16}) == (
        "int [16, 256] step 16"
    )


def test_pruned_and_stopped_trials_are_not_shown_as_failures() -> None:
    assert STATUS["PRUNED"] == "FINISHED" and STATUS["COMPLETE"] == "FINISHED"
    assert STATUS["WAITING"] == STATUS["PAUSED"] == "SCHEDULED"
    assert STATUS["FAIL"] == "FAILED"
    counts = state_counts(["COMPLETE", "PRUNED", "PAUSED", "FAIL", "COMPLETE"])
    assert counts == {
        "trials/complete": 2.0,
        "trials/pruned": 1.0,
        "trials/fail": 1.0,
        "trials/waiting": 1.0,
    }


def test_best_so_far_after_each_completed_trial() -> None:
    done = [Done(0, [0.5], 10.0), Done(2, [0.6], 30.0), Done(1, [0.7], 20.0)]
    points = parent_series(done, ["acc"], ["max"])
    assert [(p.key, p.step, p.value, p.timestamp) for p in points] == [
        ("best/acc", 1, 0.5, 10_000),
        ("best/acc", 2, 0.7, 20_000),
        ("best/acc", 3, 0.7, 30_000),
    ]
    top = best(done, ["max"])
    assert top is not None and top.number == 1
    assert best(done, ["max", "min"]) is None


def test_pareto_front_and_its_size_per_completed_trial() -> None:
    done = [
        Done(0, [1.0, 1.0], 1.0),  # loss min, speed max
        Done(1, [0.5, 0.5], 2.0),
        Done(2, [2.0, 0.2], 3.0),  # dominated by 0 and 1
        Done(3, [0.5, 2.0], 4.0),  # dominates 0 and 1
    ]
    assert sorted(pareto(done, ["min", "max"])) == [3]
    sizes = [p.value for p in parent_series(done, ["loss", "speed"], ["min", "max"])]
    assert sizes == [1.0, 2.0, 2.0, 1.0]


def test_a_failed_runs_description_starts_at_a_line_and_fits_a_tag(tmp_path: Path) -> None:
    error = "Traceback (most recent call last):\n" + "".join(
        f'  File "train.py", line {i}, in step_{i}\n    loss = model(batch)\n' for i in range(400)
    ) + "RuntimeError: diverged at step 7"  # fmt: skip
    (tmp_path / "log.txt").write_text("".join(f"report step {i}: loss=0.5\n" for i in range(900)))
    note = failure_note(error, tmp_path)
    assert len(note) < TAG_LIMIT, "MLflow would cut it, with a warning"
    shown = note.split("```\n")[1]
    assert shown.startswith('  File "train.py"') and shown.endswith("diverged at step 7\n")
    assert note.split("```\n")[3].startswith("report step "), "the log's tail: whole lines"
    assert line_tail("x" * 50, 10) == "…" + "x" * 9
    assert line_tail("short\nerror", 100) == "short\nerror"


def test_the_sweep_runs_description_links_to_its_trials_runs() -> None:
    note = sweep_note("s", parse_sweep(BASE_SWEEP), {}, "", False, "4")
    assert note.endswith("[The trials' runs](#/experiments/4/runs?workflowType=machine_learning)")
