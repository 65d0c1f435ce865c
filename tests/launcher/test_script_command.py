"""Script trials before anything runs: the command line a trial's params make, the reports
its output lines make, and the one-line refusal of each bad ``trial.command``."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from hyperfleet.platform.cli import app
from hyperfleet.platform.config.command import render, under_torchrun
from hyperfleet.platform.launcher.script.readers import MlflowReader, StdoutReader, tokens
from hyperfleet.platform.launcher.script.sources import looked_for
from hyperfleet.testing.sweeps import minimal_sweep


def test_placeholders_become_arguments(tmp_path: Path) -> None:
    command = [
        "python",
        "train.py",
        "--steps",
        "${steps}",
        "${args}",
        "--lr=${lr}",
        "${checkpoint_dir}",
    ]
    params = {"lr": 0.01, "layers": 2, "trial.precision": "bf16"}
    argv = render(command, params, tmp_path, {"steps": 30})
    assert argv == [
        sys.executable,  # python: the interpreter hyperfleet runs in
        "train.py",
        "--steps",
        "30",
        "--lr",
        "0.01",
        "--layers",
        "2",
        "--lr=0.01",
        str(tmp_path / "checkpoints"),
    ]
    wrapped = under_torchrun(["prog", "--a", "1"], 2, ["--nnodes=1"], tmp_path)
    assert wrapped[1:3] == ["-m", "torch.distributed.run"]
    assert "--nproc-per-node=2" in wrapped and wrapped[-4:] == ["--no-python", "prog", "--a", "1"]


def test_output_lines_become_reports() -> None:
    reader = StdoutReader(["val_loss"])
    assert reader.read("loading data (lr=0.1)") is None  # no objective: not a report
    assert reader.read("step=5 val_loss=0.25 val_accuracy=0.9") == (
        5,
        {"val_loss": 0.25, "val_accuracy": 0.9},
    )
    assert reader.read("epoch=7 val_loss=2e-1.") == (7, {"val_loss": 0.2})
    assert reader.read("val_loss=0.1") == (8, {"val_loss": 0.1})  # no step: the next one
    step, metrics = reader.read("step=9 val_loss=nan") or (0, {})
    assert step == 9 and math.isnan(metrics["val_loss"])
    assert tokens("url=http://x?a=1 loss=1x") == {}
    custom = StdoutReader(["val_loss"], re.compile(r"epoch (?P<epoch>\d+): loss (?P<val_loss>\S+)"))
    assert custom.read("epoch 3: loss 0.5") == (3, {"val_loss": 0.5})
    assert custom.read("step=4 val_loss=0.4") is None  # a pattern reads only what it matches
    assert looked_for(["val_loss"], "stdout", None) == (
        "no val_loss reported; looked for val_loss=… on stdout"
    )


def test_mlflow_history_becomes_reports_once() -> None:
    history: dict[str, list[tuple[int, float]]] = {"val_loss": [(1, 0.5)], "acc": [(1, 0.7)]}
    reader = MlflowReader(["val_loss"], lambda k: history.get(k, []), lambda: ["acc"])
    assert reader.poll() == [(1, {"val_loss": 0.5, "acc": 0.7})]
    history["val_loss"].append((2, 0.4))
    assert reader.poll() == [(2, {"val_loss": 0.4})]
    assert reader.poll() == []


def _script_sweep(tmp_path: Path, trial: dict[str, Any], **changes: Any) -> Path:
    data = minimal_sweep(
        trial={"workload": None, **trial},
        storage=f"sqlite:///{tmp_path / 'runs' / 'hf.db'}",
        tracking={"uri": f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}"},
        workdir=str(tmp_path / "runs"),
        **changes,
    )
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


BAD = {
    "unknown placeholder": (
        {"command": ["python", "train.py", "${lr}"]},
        "trial.command[2]: unknown placeholder ${lr}; use one of ${args}, ${trial_dir}, "
        "${checkpoint_dir}, ${steps}, ${eval_every}, ${x}",
    ),
    "args inside an element": (
        {"command": ["python", "train.py", "--all=${args}"]},
        "trial.command[2]: ${args} expands to several arguments",
    ),
    "missing script": (
        {"command": ["python", "nope.py", "${args}"]},
        "trial.command: script 'nope.py' not found in",
    ),
    "missing program": (
        {"command": ["no-such-program-xyz", "${args}"]},
        "trial.command[0]: program 'no-such-program-xyz' not found",
    ),
    "workload and command": (
        {"workload": "hyperfleet.testing.workloads:quadratic", "command": ["python", "t.py"]},
        "trial: give exactly one of workload",
    ),
    "bad pattern": (
        {"command": ["python", "train.py"], "metrics": {"pattern": "loss ([0-9.]+)"}},
        "trial.metrics.pattern: give named groups",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_command_is_one_line_exit_2_nothing_written(
    case: str, tmp_path: Path, workdir: Path
) -> None:
    (workdir / "train.py").write_text("print('val_loss=1')\n")
    trial, expected = BAD[case]
    path = _script_sweep(tmp_path, trial)
    for args in (["validate", str(path)], ["sweep", "run", str(path)]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, (case, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], lines
        assert "Traceback" not in result.output
    assert not (tmp_path / "runs").exists(), "nothing may be written before validation"


def test_population_scheduler_with_a_program_is_refused(tmp_path: Path, workdir: Path) -> None:
    (workdir / "train.py").write_text("print('val_loss=1')\n")
    path = _script_sweep(
        tmp_path,
        {"command": ["python", "train.py", "${args}"]},
        scheduler={"type": "pbt", "population": 2, "perturbation_interval": 1},
        pruner={"type": "none"},
        budget={"trials": None},
    )
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert "scheduler: pbt exploits and pauses trials" in result.stderr

    across_hosts = _script_sweep(
        tmp_path,
        {
            "command": ["python", "train.py", "${args}"],
            "metrics": {"from": "push"},
            "resources": {"devices": 2, "nodes": 2},
        },
        scheduler={"type": "pbt", "population": 2, "perturbation_interval": 1},
        pruner={"type": "none"},
        budget={"trials": None},
    )
    result = CliRunner().invoke(app, ["validate", str(across_hosts)])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: trial.resources.nodes: a program's exploits under pbt"), line


def test_a_valid_script_sweep_validates(tmp_path: Path, workdir: Path) -> None:
    (workdir / "train.py").write_text("print('val_loss=1')\n")
    path = _script_sweep(
        tmp_path,
        {"command": ["python", "train.py", "${args}", "--out", "${trial_dir}"]},
    )
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
