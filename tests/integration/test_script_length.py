"""A script trial's program decides its own length: ``trial.steps`` may be left out, and is
asked for only where something needs it (PBT's member length, a ``${steps}`` in the command);
a function trial still needs it (``ctx.max_steps``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config import load_sweep
from hyperfleet.platform.storage import Storage
from hyperfleet.spec.states import TrialState
from tests.integration.test_script_trials import PROGRAMS, run_json, script_sweep


def _without_steps(path: Path, **trial: Any) -> Path:
    data = yaml.safe_load(path.read_text())
    data["trial"].pop("steps")
    data["trial"].update(trial)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.slow
def test_a_script_trial_without_steps_runs_to_its_own_end(
    tmp_path: Path, mlflow_template: Path
) -> None:
    path = script_sweep(
        tmp_path, mlflow_template, name="own-length", pruner={"type": "median"},
        budget={"trials": 2, "max_concurrent": 1},
        space={"steps": {"type": "categorical", "choices": [4]}},
    )  # fmt: skip
    _without_steps(path)
    assert load_sweep(path).trial.steps is None
    result = run_json(path)
    assert result["state_counts"]["COMPLETE"] >= 1, result
    storage = Storage(f"sqlite:///{tmp_path / 'runs' / 'hf.db'}", create=False)
    done = [t for t in storage.trials.of("own-length") if t.state == TrialState.COMPLETE]
    storage.close()
    assert done and all(t.last_step == 4 for t in done)  # the program's own 4 steps


def test_steps_are_asked_for_only_where_needed(tmp_path: Path, mlflow_template: Path) -> None:
    base = {"name": "needs", "budget": {"trials": 1}}
    population = {"type": "pbt", "population": 2, "perturbation_interval": 2}
    pbt = script_sweep(tmp_path, mlflow_template, name="needs", scheduler=population,
                       budget={"max_concurrent": 2}, trial={"metrics": {"from": "push"}},
                       space={"y": {"type": "float", "low": 0.0, "high": 1.0}})  # fmt: skip
    with pytest.raises(ConfigError, match=r"trial\.steps: .*pbt"):
        load_sweep(_without_steps(pbt))
    flag = script_sweep(tmp_path, mlflow_template, **base)
    command = ["python", str(PROGRAMS / "report.py"), "${args}", "--steps", "${steps}"]
    with pytest.raises(ConfigError, match=r"trial\.steps: .*\$\{steps\}"):
        load_sweep(_without_steps(flag, command=command))
    function = script_sweep(tmp_path, mlflow_template, **base)
    with pytest.raises(ConfigError, match=r"trial\.steps"):
        load_sweep(_without_steps(function, command=None, workload="digits"))
