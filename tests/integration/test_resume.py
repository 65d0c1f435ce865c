"""Exact resumption through the platform.

A digits trial (fp32, a report every step, a checkpoint every 10) is stopped by SIGTERM to
``sweep run`` at step 25 and continued by running the command again (it redoes steps 21-25 from
its checkpoint at 20). Trial 0 of the same sweep, with the same params, ran uninterrupted before
it: the interrupted trial's per-step loss curve read back from MLflow must equal trial 0's (max
abs difference <= 1e-6), and it stays one trial and one MLflow run with no step logged twice. At
D=1 the primary checkpoint directory is deleted before continuing, so the trial restores from
``checkpoint.replica``.

A D=2 checkpoint resumed at D=1 goes through the trial runtime itself (torchrun and
``trial_entry`` with spec files, as the launcher runs them): it continues from the same step with
the same parameters as an uninterrupted D=2 run (whose step-50 checkpoint it starts from).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from hyperfleet.platform.storage.paths import checkpoint_dir, replica_folder
from hyperfleet.spec.workloads import BUILTIN
from hyperfleet.testing.workloads import HOLD_PARAMS, held_marker, with_hold
from tests.integration.cli import cli_env, interrupt_when_logged

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

pytestmark = pytest.mark.slow
ENV = cli_env()


def held_digits(ctx: Any) -> None:
    """The built-in digits workload, which a test can hold after a report (so that it stops
    the trial at a known step without racing it; see ``tests.integration.workloads``)."""
    from hyperfleet.trials.workloads import digits

    with_hold(ctx)
    digits.main(ctx)


held_digits.hyperfleet_params = {**(BUILTIN["digits"].params or {}), **HOLD_PARAMS}  # type: ignore[attr-defined]


def curve(client: MlflowClient, run_id: str) -> dict[int, float]:
    history = client.get_metric_history(run_id, "loss")
    steps = [m.step for m in history]
    assert len(steps) == len(set(steps)), f"a step was logged twice: {sorted(steps)}"
    return {m.step: m.value for m in history}


@pytest.mark.parametrize(
    "devices", [1, pytest.param(2, marks=pytest.mark.long)], ids=["D1-from-replica", "D2"]
)
def test_stopped_trial_resumes_on_the_uninterrupted_curve(
    devices: int, sweep_file: Callable[..., Path], tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient

    replica = tmp_path / "replica"
    release = tmp_path / "release"  # trial 1 holds after its report at step 25 until this exists
    path = sweep_file({
        "name": "resume",
        "objective": {"metric": "loss", "mode": "min"},
        "scheduler": {"type": "random", "seed": 0},
        "budget": {"trials": 2, "max_concurrent": 1},
        "space": {"lr": {"type": "categorical", "choices": [0.01]}},
        "trial": {
            "workload": "tests.integration.test_resume:held_digits",
            "params": {"batch_size": 64, "hold_file": str(release), "hold_at": 25,
                       "hold_trial": 1},
            "steps": 40, "eval_every": 1,
            "resources": {"devices": devices}, "parallel": {"data": devices},
            "checkpoint": {"every": 10, "keep": 2, "replica": str(replica)},
        },
    })  # fmt: skip
    cmd = [sys.executable, "-m", "hyperfleet.platform", "sweep", "run", str(path), "--json",
           "--devices", f"cpu:{devices}"]  # fmt: skip
    held = held_marker(release, 1)
    storage = interrupt_when_logged(cmd, ENV, tmp_path / "runs", "resume", held, ("loss", 25))
    assert held.read_text() == "25"
    mlflow_uri = f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}"
    stopped = storage.trials.get("resume", 1)
    assert stopped.state == "WAITING" and stopped.last_step == 25
    primary = checkpoint_dir(tmp_path / "runs", "resume", 1)
    sweep_replica = replica_folder(str(replica), "resume", storage.sweeps.get("resume").created_at)
    assert [p.name for p in replica.iterdir()] == [sweep_replica.name]
    own_replica = sweep_replica / "trial-0001"  # one directory per trial
    assert 20 in [int(p.stem[5:]) for p in own_replica.glob("step-*.pt")]
    if devices == 1:
        shutil.rmtree(primary)

    release.touch()  # the continued trial must not hold again
    again = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600, check=False)
    assert again.returncode == 0, again.stderr[-3000:]
    resumed = storage.trials.get("resume", 1)
    assert resumed.state == "COMPLETE" and resumed.last_step == 40
    assert resumed.attempts == 2 and resumed.mlflow_run_id == stopped.mlflow_run_id
    log = Path(resumed.log_path).read_text()
    assert "resumes from its checkpoint at step 20" in log
    if devices == 1:
        assert "using the replica" in log

    client = MlflowClient(tracking_uri=mlflow_uri)
    reference = curve(client, storage.trials.get("resume", 0).mlflow_run_id)
    continued = curve(client, resumed.mlflow_run_id)
    assert sorted(continued) == sorted(reference) == list(range(1, 41))
    diff = max(abs(continued[s] - reference[s]) for s in reference)
    assert diff <= 1e-6, f"max abs loss difference {diff}"


# -- D=2 checkpoint, resumed at D=1, through trial_entry ----------------------------------------


def run_trial_processes(config: dict[str, Any], trial_dir: Path, nproc: int) -> str:
    """Run ``trial_entry`` under torchrun on a spec, as the launcher does; its stdout."""
    from hyperfleet.platform.config import parse_sweep
    from hyperfleet.platform.launcher.torchrun import torchrun_command
    from hyperfleet.spec.wire import TrialSpec
    from hyperfleet.spec.workloads import merged_params

    cfg = parse_sweep(config)
    spec = TrialSpec(
        sweep=cfg.name, number=0, trial=cfg.trial,
        params=merged_params("digits", cfg.trial.params, {"lr": 0.01}),
        workdir=str(trial_dir.parent), trial_dir=str(trial_dir),
    )  # fmt: skip
    spec_path = spec.write(trial_dir.parent / f"{trial_dir.name}-{nproc}-{cfg.trial.steps}.json")
    env = {**ENV, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        torchrun_command(spec_path, nproc, f"t-{trial_dir.name}"),
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def digits_config(tmp_path: Path, devices: int, steps: int) -> dict[str, Any]:
    return {
        "name": "reshard", "objective": {"metric": "loss", "mode": "min"},
        "budget": {"trials": 1},
        "space": {"lr": {"type": "categorical", "choices": [0.01]}},
        "trial": {"workload": "digits", "params": {"batch_size": 64}, "steps": steps,
                  "eval_every": 5, "resources": {"devices": devices},
                  "parallel": {"data": devices}, "checkpoint": {"every": 10, "keep": 10}},
        "workdir": str(tmp_path / "runs"),
    }  # fmt: skip


def test_d2_checkpoint_continues_at_d1(tmp_path: Path) -> None:
    import torch

    moved, reference = tmp_path / "moved", tmp_path / "reference"
    # the uninterrupted D=2 run; its checkpoint at step 50 is what a D=2 run stopped there holds
    run_trial_processes(digits_config(tmp_path, 2, 60), reference, 2)
    (moved / "checkpoints").mkdir(parents=True)
    for saved in (reference / "checkpoints").glob("step-000000050.*"):
        shutil.copy(saved, moved / "checkpoints" / saved.name)
    out = run_trial_processes(digits_config(tmp_path, 1, 60), moved, 1)
    assert "resumes from its checkpoint at step 50" in out
    assert "saved at 2 ranks on 1 ranks" in out
    reported = [int(line.split()[1].rstrip(":")) for line in out.splitlines()
                if line.startswith("step ")]  # fmt: skip
    assert reported == [55, 60], "continues from step 50, reports no earlier step"

    def state(directory: Path, step: int) -> dict[str, Any]:
        return torch.load(directory / "checkpoints" / f"step-{step:09d}.pt", weights_only=True)

    a, b = state(moved, 60), state(reference, 60)
    assert a["world_size"] == 1 and b["world_size"] == 2
    assert a["data"] == b["data"], "the same global data position"
    for name, tensor in b["model"].items():
        torch.testing.assert_close(a["model"][name], tensor, rtol=0, atol=1e-5)
