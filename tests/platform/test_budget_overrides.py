"""``sweep run --trials N --timeout D`` and ``hyperfleet.run(..., trials=, timeout=)``: the
run's budget replaces the file's, the run says so, and the stored sweep records it (a later
run without them goes back to the file's); a bad value is one line naming the option, exit 2,
with nothing stored."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

import hyperfleet
from hyperfleet.errors import ConfigError
from hyperfleet.platform.config.overrides import budget_override, parse_with
from hyperfleet.platform.storage import Storage
from hyperfleet.testing.sweeps import minimal_sweep
from tests.integration.cli import invoke


def _sweep(tmp_path: Path, mlflow_template: Path | None = None, **changes: Any) -> dict[str, Any]:
    runs = tmp_path / "runs"
    tracking = f"sqlite:///{runs / 'mlflow.db'}"
    if mlflow_template is not None:
        runs.mkdir()
        shutil.copy(mlflow_template, runs / "mlflow.db")
    return minimal_sweep(
        name="smoke", workdir=str(runs), storage=f"sqlite:///{runs / 'hf.db'}",
        tracking={"uri": tracking, "log_model": False}, **changes,
    )  # fmt: skip


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "smoke.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _stored(data: dict[str, Any]) -> tuple[Any, int]:
    st = Storage.open_readonly(data["storage"])
    try:
        row = st.sweeps.get(data["name"])
        assert row is not None and row.config is not None
        return row.config.budget, len(st.trials.of(data["name"]))
    finally:
        st.close()


def test_the_overrides_replace_the_files_budget_and_are_recorded(
    tmp_path: Path, mlflow_template: Path
) -> None:
    data = _sweep(tmp_path, mlflow_template, budget={"trials": 2, "timeout": "30m"})
    path = _write(tmp_path, data)
    result = invoke("sweep", "run", str(path), "--trials", "3", "--timeout", "2m")
    assert result.exit_code == 0, result.output
    assert "budget for this run: trials 3, timeout 120s" in result.stdout
    budget, trials = _stored(data)
    assert (budget.trials, budget.timeout, trials) == (3, 120.0, 3)
    # without them the file's budget is stored again, and the sweep continues to it
    again = invoke("sweep", "run", str(path))
    assert again.exit_code == 0, again.output
    assert "budget for this run" not in again.stdout
    budget, trials = _stored(data)
    assert (budget.trials, budget.timeout, trials) == (2, 1800.0, 3)


@pytest.mark.parametrize(
    ("args", "starts", "says"),
    [
        (["--trials", "0"], "--trials:", "greater than or equal to 1"),
        (["--trials", "two"], "--trials:", "valid integer"),
        (["--trials", "2.5"], "--trials:", "valid integer"),
        (["--timeout", "soon"], "--timeout:", "duration such as 90s"),
        (["--timeout", "0"], "--timeout:", "greater than 0"),
    ],
)
def test_a_bad_override_is_one_line_and_stores_nothing(
    tmp_path: Path, args: list[str], starts: str, says: str
) -> None:
    path = _write(tmp_path, _sweep(tmp_path))
    result = invoke("sweep", "run", str(path), *args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {starts}") and says in lines[0], lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["smoke.yaml"]  # no store, no folder


def test_a_check_reading_the_budget_names_the_option() -> None:
    pbt = minimal_sweep(
        name="pbt", scheduler={"type": "pbt", "population": 2, "perturbation_interval": 2},
        budget={"trials": None},
    )  # fmt: skip
    with pytest.raises(ConfigError) as raised:
        parse_with(pbt, budget_override(trials="3"))
    assert raised.value.problems == [
        "--trials: 3 differs from scheduler.population (2); omit it for PBT"
    ]
    assert parse_with(pbt, budget_override()).budget.trials is None  # none given: the file's


def test_run_takes_them_from_python(
    tmp_path: Path, mlflow_template: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _sweep(tmp_path, mlflow_template)
    result = hyperfleet.run(data, trials=3, timeout="1h")
    assert len(result.trials) == 3
    assert "budget for this run: trials 3, timeout 3600s" in capsys.readouterr().err
    budget, _ = _stored(data)
    assert (budget.trials, budget.timeout) == (3, 3600.0)


def test_run_refuses_a_bad_one_before_anything_is_stored(tmp_path: Path) -> None:
    data = _sweep(tmp_path)
    with pytest.raises(ConfigError) as raised:
        hyperfleet.run(data, trials=0)
    assert raised.value.problems[0].startswith("run(trials=...): ")
    with pytest.raises(ConfigError, match=r"run\(timeout=\.\.\.\): expected a duration"):
        hyperfleet.run(data, timeout="later")
    assert not (tmp_path / "runs").exists()
