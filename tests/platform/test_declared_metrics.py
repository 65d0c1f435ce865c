"""Metrics known early: a workload declares the metrics it reports (the built-ins do), an
objective it does not declare is refused at validation with the closest name, and for any
workload a first report without the objective fails the trial at that report, naming what it
reported, instead of training to the end for a value that never comes."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import hyperfleet
from hyperfleet.errors import ConfigError
from hyperfleet.platform.cli import app
from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.launcher.script.sources import StdoutSource
from hyperfleet.platform.storage import Storage
from hyperfleet.spec.states import TrialState
from hyperfleet.spec.trial import MetricsConfig
from hyperfleet.spec.workloads import BUILTIN, parse_supports, workload_supports
from hyperfleet.testing.sweeps import minimal_sweep
from tests.conftest import BASE_SWEEP, deep_update

DIGITS_REPORTS = {"loss", "val_loss", "val_accuracy", "samples_per_s", "step_time_s"}
CHARLM_REPORTS = {"loss", "val_loss", "samples_per_s", "step_time_s", "tokens_per_s"}


def declared(ctx: Any) -> None:
    """A custom workload that declares its metrics (validation reads them; it never runs)."""


declared.hyperfleet_supports = {"metrics": ["accuracy", "loss"]}  # type: ignore[attr-defined]


def problems(changes: dict[str, Any]) -> list[str]:
    try:
        parse_sweep(deep_update(BASE_SWEEP, changes))
    except ConfigError as exc:
        return exc.problems
    return []


# -- declarations ------------------------------------------------------------------------------


def test_the_builtins_declare_what_they_report() -> None:
    """What a built-in's report carries on CPU in fp32 (tests/integration runs them), and the
    names only fp16 or CUDA add, are all declared."""
    digits, charlm = (workload_supports(w).metrics for w in ("digits", "charlm"))
    assert digits is not None and charlm is not None
    assert DIGITS_REPORTS | {"loss_scale", "skipped_steps"} == digits
    assert CHARLM_REPORTS | {"mfu", "loss_scale", "skipped_steps"} == charlm
    assert all(info.supports.metrics for info in BUILTIN.values())


def test_a_custom_declaration_of_metrics_is_read_and_checked() -> None:
    assert parse_supports({"metrics": ["b", "a"]}, "w").metrics == frozenset({"a", "b"})
    assert parse_supports({}, "w").metrics is None
    for bad in ("loss", [], ["loss", 3]):
        with pytest.raises(ConfigError) as err:
            parse_supports({"metrics": bad}, "pkg.train:main")
        (line,) = err.value.problems
        assert "metrics = " in line and "expected a non-empty list of metric names" in line


# -- validation ----------------------------------------------------------------------------------


def test_an_objective_a_builtin_does_not_report_is_refused_with_the_closest_name(
    tmp_path: Path,
) -> None:
    data = deep_update(BASE_SWEEP, {"objective": {"metric": "val_acuracy"}})
    file = tmp_path / "typo.yaml"
    file.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(app, ["validate", str(file)])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: objective.metric: 'val_acuracy' is not a metric workload 'digits' reports; "
        "did you mean 'val_accuracy'? expected one of loss, loss_scale, samples_per_s, "
        "skipped_steps, step_time_s, val_accuracy, val_loss"
    ]


def test_each_objective_of_several_is_checked() -> None:
    found = problems({
        "scheduler": {"type": "nsga2"},
        "objective": None,
        "objectives": [{"metric": "val_loss", "mode": "min"}, {"metric": "tokens", "mode": "max"}],
    })  # fmt: skip
    assert len(found) == 1, found
    assert found[0].startswith("objectives.1.metric: 'tokens' is not a metric workload 'digits'")


def test_a_custom_declaration_is_checked_and_an_undeclared_workload_is_not() -> None:
    ref = f"{__name__}:declared"
    (line,) = problems({"trial": {"workload": ref}})
    assert line == (
        f"objective.metric: 'val_accuracy' is not a metric workload {ref!r} reports; did you "
        f"mean 'accuracy'? expected one of accuracy, loss"
    )
    assert problems({"trial": {"workload": ref}, "objective": {"metric": "loss"}}) == []
    assert problems({"trial": {"workload": "tests.faults.workloads:main"}}) == []


def test_a_script_objective_must_be_a_named_group_of_its_pattern() -> None:
    script = {"command": ["python", "-c", "pass"], "workload": None, "params": {}, "steps": None,
              "metrics": {"pattern": r"step (?P<step>\d+) acc (?P<val_acc>\S+)"}}  # fmt: skip
    (line,) = problems({"trial": script, "objective": {"metric": "val_accuracy"}})
    assert line == (
        "objective.metric: 'val_accuracy' is not a metric trial.metrics.pattern reads (its "
        "named groups); did you mean 'val_acc'? expected one of val_acc"
    )
    assert problems({"trial": script, "objective": {"metric": "val_acc"}}) == []


# -- the first report -----------------------------------------------------------------------------


def test_the_first_report_line_names_what_was_reported() -> None:
    from hyperfleet.spec.steps import missing_objective

    assert missing_objective(["val_loss"], ["loss", "val_loss"]) is None
    assert missing_objective(["val_acuracy"], ["val_acc", "loss"]) == (
        "objective metric 'val_acuracy' not in the first report (reported: val_acc, loss); "
        "did you mean 'val_acc'? report it from the first report on, or fix objective.metric"
    )


def misnamed() -> Any:
    """A workload (shipped by value: a nested function) that reports ``val_acc`` and ``loss``
    at every step, never the objective's name, and writes each step it trains to the file
    ``params["steps_file"]``."""

    def train(ctx: Any) -> None:
        for step in range(1, ctx.max_steps + 1):
            with open(ctx.params["steps_file"], "a") as f:
                f.write(f"{step}\n")
            ctx.report(step, {"val_acc": 0.5, "loss": 1.0 / step})

    return train


def test_a_first_report_without_the_objective_fails_the_trial_there(
    tmp_path: Path, mlflow_template: Path
) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(mlflow_template, runs / "mlflow.db")
    steps_file = tmp_path / "steps.txt"
    data = minimal_sweep(
        name="misnamed",
        objective={"metric": "val_acuracy", "mode": "max"},
        budget={"trials": 1, "max_retries": 0},
        trial={"steps": 50, "params": {"steps_file": str(steps_file)}},
        workdir=str(runs),
        storage=f"sqlite:///{runs / 'hf.db'}",
        tracking={"uri": f"sqlite:///{runs / 'mlflow.db'}", "log_model": False},
    )
    del data["trial"]["workload"]
    hyperfleet.run(data, misnamed(), progress=False)
    assert steps_file.read_text().split() == ["1"]  # not the 50 steps of its budget
    st = Storage.open_readonly(f"sqlite:///{runs / 'hf.db'}")
    try:
        (trial,) = st.trials.of("misnamed")
    finally:
        st.close()
    assert trial.state == TrialState.FAIL and trial.error is not None
    assert (
        "ObjectiveMissingError: objective metric 'val_acuracy' not in the first report "
        "(reported: val_acc, loss); did you mean 'val_acc'?"
    ) in trial.error


def test_a_script_that_never_reports_its_objective_is_told_what_it_printed() -> None:
    source = StdoutSource(["val_acuracy"], MetricsConfig())
    for line in ("epoch=1 loss=0.5 val_acc=0.7", "done"):
        assert source.read_line(line) == []
    assert source.looked_for() == (
        "no val_acuracy reported; looked for val_acuracy=… on stdout (it printed loss, "
        "val_acc; did you mean 'val_acc'?)"
    )
