"""Nothing of a sweep is stored before it is accepted.

Each refusal of ``sweep run`` and of ``hyperfleet.run`` comes before any storage row, run
directory marker, trial directory or MLflow store exists; ``validate`` refuses the same file
with the same line; and the file, once fixed, runs under the same name (no stub of the refused
sweep is left to make its name "differ from the stored sweep")."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import hyperfleet
from hyperfleet.errors import ConfigError
from hyperfleet.platform.cli import app
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.ownership import MARKER
from hyperfleet.spec.states import TrialState
from hyperfleet.testing.sweeps import minimal_sweep

NAME = "refused"
X = {"type": "float", "low": 0.0, "high": 1.0}
STEPPED_X = {**X, "step": 0.5}
TWO_OBJECTIVES = [{"metric": "loss", "mode": "min"}, {"metric": "pid", "mode": "min"}]


def sweep(runs: Path, **changes: Any) -> dict[str, Any]:
    """The minimal sweep named :data:`NAME`, its stores and run directory under ``runs``."""
    return minimal_sweep(
        name=NAME,
        workdir=str(runs),
        storage=f"sqlite:///{runs / 'hf.db'}",
        tracking={"uri": f"sqlite:///{runs / 'mlflow.db'}", "log_model": False},
        **changes,
    )


def two_objectives(runs: Path, scheduler: str) -> dict[str, Any]:
    data = sweep(runs, scheduler={"type": scheduler, "seed": 0})
    del data["objective"]
    return {**data, "objectives": TWO_OBJECTIVES}


def digits(runs: Path, metric: str) -> dict[str, Any]:
    """Two in-process trials of the built-in digits workload, two steps each."""
    return sweep(
        runs,
        objective={"metric": metric, "mode": "max"},
        space={"lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True}},
        trial={"workload": "digits", "steps": 2, "params": {"batch_size": 32, "hidden": 16}},
    )


Make = Callable[[Path], dict[str, Any]]

# refusal kind -> (the refused sweep, the same sweep fixed, the refusal's line)
KINDS: dict[str, tuple[Make, Make, str]] = {
    "grid over a float without step": (
        lambda runs: sweep(runs, scheduler={"type": "grid"}, space={"x": X}),
        lambda runs: sweep(runs, scheduler={"type": "grid"}, space={"x": STEPPED_X}),
        "space.x: a float without step, which scheduler.type 'grid' cannot enumerate; "
        "give space.x.step, or use another scheduler.type such as tpe or random",
    ),
    "grid over a log-scaled int": (
        lambda runs: sweep(
            runs,
            scheduler={"type": "grid"},
            space={"x": STEPPED_X, "n": {"type": "int", "low": 1, "high": 4, "log": True}},
        ),
        lambda runs: sweep(
            runs,
            scheduler={"type": "grid"},
            space={"x": STEPPED_X, "n": {"type": "int", "low": 1, "high": 2}},
        ),
        "space.n: a log-scaled int, which scheduler.type 'grid' cannot enumerate; drop space.n.log",
    ),
    "grid over a branch's float without step": (
        lambda runs: sweep(
            runs,
            scheduler={"type": "grid"},
            space={
                "x": STEPPED_X,
                "opt": {"type": "categorical", "choices": {"a": {}, "b": {"m": X}}},
            },
        ),
        lambda runs: sweep(
            runs,
            scheduler={"type": "grid"},
            space={
                "x": STEPPED_X,
                "opt": {"type": "categorical", "choices": {"a": {}, "b": {"m": STEPPED_X}}},
            },
        ),
        "space.opt.choices.b.m: a float without step",
    ),
    "two objectives for a single-objective scheduler": (
        lambda runs: two_objectives(runs, "cmaes"),
        lambda runs: two_objectives(runs, "random"),
        "scheduler.type: 'cmaes' optimises a single objective, but the sweep has 2 objectives; "
        "use one of gp, grid, nsga2, qmc, random, tpe",
    ),
    "an objective the workload does not report": (
        lambda runs: digits(runs, "val_acuracy"),
        lambda runs: digits(runs, "val_accuracy"),
        "objective.metric: 'val_acuracy' is not a metric workload 'digits' reports; did you "
        "mean 'val_accuracy'?",
    ),
}


def assert_nothing_stored(runs: Path) -> None:
    """No sweep in the storage (its file absent, or without a sweep), no MLflow store, no
    run directory's marker and no trial directory."""
    db = runs / "hf.db"
    if db.exists():
        st = Storage.open_readonly(f"sqlite:///{db}")
        try:
            assert st.sweeps.all() == []
        finally:
            st.close()
    assert not (runs / "mlflow.db").exists()
    assert not list(runs.rglob(MARKER)) and not list(runs.rglob("trial-*"))


def completed(runs: Path) -> list[TrialState]:
    st = Storage.open_readonly(f"sqlite:///{runs / 'hf.db'}")
    try:
        return [t.state for t in st.trials.of(NAME)]
    finally:
        st.close()


def one_line(result: Any) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    return str(lines[0])


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_refused_sweep_run_stores_nothing_and_the_fixed_file_runs(
    tmp_path: Path, mlflow_template: Path, kind: str
) -> None:
    refused, fixed, expected = KINDS[kind]
    runs, file = tmp_path / "runs", tmp_path / "sweep.yaml"
    file.write_text(yaml.safe_dump(refused(runs), sort_keys=False))
    runner = CliRunner()
    validated = one_line(runner.invoke(app, ["validate", str(file)]))
    ran = one_line(runner.invoke(app, ["sweep", "run", str(file)]))
    assert validated == ran and ran.startswith(f"error: {expected}"), (validated, ran)
    assert_nothing_stored(runs)

    runs.mkdir(exist_ok=True)  # a migrated MLflow store, copied: seconds saved
    shutil.copy(mlflow_template, runs / "mlflow.db")
    file.write_text(yaml.safe_dump(fixed(runs), sort_keys=False))
    again = runner.invoke(app, ["sweep", "run", str(file)])
    assert again.exit_code == 0, again.output
    assert completed(runs) == [TrialState.COMPLETE] * 2


def test_a_refused_run_from_python_stores_nothing_and_the_fixed_config_runs(
    tmp_path: Path, mlflow_template: Path
) -> None:
    refused, fixed, expected = KINDS["grid over a float without step"]
    runs = tmp_path / "runs"
    with pytest.raises(ConfigError) as err:
        hyperfleet.run(refused(runs), progress=False)
    assert err.value.problems == [expected]
    assert_nothing_stored(runs)
    runs.mkdir(exist_ok=True)
    shutil.copy(mlflow_template, runs / "mlflow.db")
    result = hyperfleet.run(fixed(runs), progress=False)
    assert result.name == NAME and completed(runs) == [TrialState.COMPLETE] * 2


def test_a_changed_space_is_refused_before_the_stored_sweep_is_opened(
    tmp_path: Path, mlflow_template: Path
) -> None:
    """A continued sweep keeps its space: refused by the checks made before anything is
    written (the stored sweep is neither reopened nor marked running)."""
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(mlflow_template, runs / "mlflow.db")
    hyperfleet.run(sweep(runs), progress=False)
    with pytest.raises(ConfigError) as err:
        hyperfleet.run(sweep(runs, space={"x": STEPPED_X}), progress=False)
    assert err.value.problems == [
        f"space: differs from the stored sweep {NAME!r}, and a continued sweep keeps its space; "
        f"give a new name, or overwrite=True to drop the stored sweep and start over"
    ]
    st = Storage.open_readonly(f"sqlite:///{runs / 'hf.db'}")
    try:
        row = st.sweeps.get(NAME)
    finally:
        st.close()
    assert row is not None and row.status == "done"
