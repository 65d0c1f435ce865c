"""The documented commands run as written from the repository root, with no PYTHONPATH: the
sweep file's directory and the current directory are on the workload's import path, in the
command's process and in its trial processes.

The command runs as the ``hyperfleet`` console script does (a script, whose own directory, not
the current one, starts ``sys.path``); the only PYTHONPATH entry is a folder holding this
checkout's ``hyperfleet`` package and nothing else, so ``examples`` and a user's module are
found by hyperfleet or not at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MODULE = "from hyperfleet.testing.workloads import quadratic\n"


@pytest.fixture(scope="module")
def hyperfleet_cmd(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], dict[str, str]]:
    shim = tmp_path_factory.mktemp("shim")
    (shim / "hyperfleet").symlink_to(ROOT / "hyperfleet")
    script = shim / "hyperfleet_cli.py"
    script.write_text("from hyperfleet.platform.cli import main\n\nmain()\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return [sys.executable, str(script)], {**env, "PYTHONPATH": str(shim)}


def run(
    cmd: tuple[list[str], dict[str, str]], *args: str, cwd: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*cmd[0], *args], cwd=cwd, env=cmd[1], capture_output=True, text=True, timeout=600,
        check=False,
    )  # fmt: skip


@pytest.mark.parametrize("example", ["lightning", "transformers"])
def test_the_examples_validate_from_the_repository_root(
    hyperfleet_cmd: tuple[list[str], dict[str, str]], example: str
) -> None:
    proc = run(hyperfleet_cmd, "validate", f"examples/{example}/sweep.yaml", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]


def _sweep(folder: Path, storage: Path) -> Path:
    data = {
        "name": "beside", "objective": {"metric": "loss", "mode": "min"},
        "scheduler": {"type": "random", "seed": 0}, "budget": {"trials": 1},
        "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        "trial": {"workload": "mywork:quadratic", "steps": 2, "eval_every": 1,
                  "resources": {"devices": 1}},
        "storage": f"sqlite:///{storage / 'hf.db'}",
        "tracking": {"uri": f"sqlite:///{storage / 'mlflow.db'}", "log_model": False},
        "workdir": str(storage / "runs"),
    }  # fmt: skip
    path = folder / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("where", ["beside the sweep file", "in the current directory"])
def test_a_workload_module_is_found_by_the_trials(
    hyperfleet_cmd: tuple[list[str], dict[str, str]], tmp_path: Path, where: str
) -> None:
    files, cwd = tmp_path / "files", tmp_path / "here"
    files.mkdir()
    cwd.mkdir()
    (files if where == "beside the sweep file" else cwd).joinpath("mywork.py").write_text(MODULE)
    sweep = _sweep(files, tmp_path)
    proc = run(hyperfleet_cmd, "sweep", "run", str(sweep), "--json", "--devices", "cpu:1", cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["state_counts"]["COMPLETE"] == 1, summary
