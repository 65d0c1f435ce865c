"""``resources.devices: N`` of a function trial is ``parallel.data: N`` unless the file says
otherwise (a pipeline takes its share first); a layout the file gives is kept and checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from hyperfleet.errors import ConfigError
from hyperfleet.platform.cli import app
from hyperfleet.platform.config import load_sweep
from tests.conftest import BASE_SWEEP, deep_update


def _file(tmp_path: Path, trial: dict[str, Any], **top: Any) -> Path:
    data = {**deep_update(BASE_SWEEP, {}), **top}
    data["trial"] = {**{k: v for k, v in data["trial"].items() if k != "parallel"}, **trial}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("trial", "data", "pipeline"),
    [({"resources": {"devices": 2}}, 2, 1), ({"resources": {"devices": 4}}, 4, 1),
     ({"resources": {"devices": 0}}, 1, 1), ({}, 2, 1)],
)  # fmt: skip
def test_devices_without_a_layout_are_data_parallel(
    tmp_path: Path, trial: dict[str, Any], data: int, pipeline: int
) -> None:
    path = _file(tmp_path, trial)
    cfg = load_sweep(path)
    assert (cfg.trial.parallel.data, cfg.trial.parallel.pipeline) == (data, pipeline)
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output


def test_a_pipeline_takes_its_share_first(tmp_path: Path) -> None:
    trial = {"workload": "charlm", "params": {"batch_size": 32}, "resources": {"devices": 4},
             "parallel": {"pipeline": 2, "microbatches": 2}}  # fmt: skip
    space = {"lr": BASE_SWEEP["space"]["lr"]}
    objective = {"metric": "val_loss", "mode": "min"}  # what charlm reports
    cfg = load_sweep(_file(tmp_path, trial, space=space, objective=objective))
    assert (cfg.trial.parallel.data, cfg.trial.parallel.pipeline) == (2, 2)


def test_a_layout_said_otherwise_is_kept_and_checked(tmp_path: Path) -> None:
    path = _file(tmp_path, {"resources": {"devices": 3}, "parallel": {"data": 2}})
    with pytest.raises(ConfigError, match=r"trial.resources.devices: 3 != parallel.data"):
        load_sweep(path)


def test_a_script_trial_keeps_its_own_layout(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('ok')\n")
    data = deep_update(BASE_SWEEP, {})
    command = ["python", str(tmp_path / "train.py")]
    data["trial"] = {"command": command, "steps": 10, "resources": {"devices": 2}}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    assert load_sweep(path).trial.parallel.data == 1
