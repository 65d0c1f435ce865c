"""Interrupting ``sweep run`` (SIGINT or SIGTERM) stops every trial process, leaves no trial
RUNNING, and the same command continues the sweep to its budget without redoing COMPLETE
trials; the interrupted trial resumes from its checkpoint as the same trial and MLflow run.
Both signals leave the same stored state, which is all a continue reads: the continue runs
once, after SIGINT."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hyperfleet.platform.storage import Storage
from hyperfleet.testing.sweeps import minimal_sweep
from hyperfleet.testing.workloads import held_marker
from tests.integration.cli import STORE_POLL_S, cli_env, in_mlflow, wait_until

pytestmark = pytest.mark.slow


def trial_processes(under: Path) -> list[int]:
    """PIDs of live hyperfleet trial processes (torchrun agents and workers) whose spec file is
    under ``under`` (this test's: other sweeps may run on the machine)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            state = (entry / "stat").read_text().split()[2]
        except OSError:
            continue
        if (
            b"hyperfleet.platform.trial_entry" in cmd
            and f"{under}/".encode() in cmd
            and state != "Z"
        ):
            pids.append(int(entry.name))
    return pids


@dataclass
class Stopped:
    """A sweep stopped by a signal while trial 1 held at step 30."""

    cmd: list[str]
    storage: Storage
    release: Path
    mlflow_uri: str
    first: Any  # trial 0 as Optuna recorded it (COMPLETE)
    interrupted: Any  # trial 1's record after the stop


def interrupt(sig: signal.Signals, sweep_file: Callable[..., Path], tmp_path: Path) -> Stopped:
    """Run the sweep, stop it with ``sig`` while trial 1 holds, and check what it left: no
    trial process, no RUNNING trial, trial 0 COMPLETE and trial 1 WAITING at step 30."""
    import optuna

    release = tmp_path / "release"  # trial 1 holds after its report at step 30 until this exists
    hold = {"hold_file": str(release), "hold_at": 30, "hold_trial": 1}
    path = sweep_file(
        minimal_sweep(
            name="interrupted",
            scheduler={"type": "random", "seed": 3},
            budget={"trials": 3, "max_concurrent": 1},
            trial={
                "params": hold,
                "steps": 200,
                "eval_every": 10,
                "resources": {"devices": 2},
                "parallel": {"data": 2},
            },
        )
    )
    db = f"sqlite:///{tmp_path / 'runs' / 'hf.db'}"
    cmd = [
        sys.executable,
        "-m",
        "hyperfleet.platform",
        "sweep",
        "run",
        str(path),
        "--json",
        "--devices",
        "cpu:2",
    ]
    env = cli_env()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    storage = Storage(db)
    held = held_marker(release, 1)
    wait_until(held.exists, "trial 1 held after its report at step 30", proc)
    assert held.read_text() == "30"
    t = storage.trials.get("interrupted", 1)
    assert t is not None and t.state == "RUNNING" and t.last_step == 30
    mlflow_uri = f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}"
    logged = in_mlflow(mlflow_uri, storage, "interrupted", 1, "loss", 30)
    wait_until(logged, "trial 1's step 30 to reach MLflow", proc, every=STORE_POLL_S)
    first = optuna.load_study(study_name="interrupted", storage=storage.optuna).trials[0]
    assert first.state.name == "COMPLETE"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert json.loads(out.strip().splitlines()[-1])["interrupted"] is True
    assert not trial_processes(tmp_path), "trial processes outlived the sweep"
    study = optuna.load_study(study_name="interrupted", storage=storage.optuna)
    states = [t.state.name for t in study.trials]
    assert "RUNNING" not in states
    assert states == ["COMPLETE", "WAITING"]
    interrupted = storage.trials.get("interrupted", 1)
    assert interrupted.state == "WAITING" and interrupted.last_step == 30
    return Stopped(cmd, storage, release, mlflow_uri, first, interrupted)


@pytest.mark.long  # SIGINT's test in make test shows the rule; SIGTERM is its second signal
def test_sigterm_stops_the_sweep_as_an_interrupt_does(
    sweep_file: Callable[..., Path], tmp_path: Path
) -> None:
    """What a stop leaves in storage is all that the continue reads (shown after SIGINT)."""
    interrupt(signal.SIGTERM, sweep_file, tmp_path)


def test_sigint_stops_the_sweep_and_the_same_command_continues_it(
    sweep_file: Callable[..., Path], tmp_path: Path
) -> None:
    import optuna
    from mlflow.tracking import MlflowClient

    stopped = interrupt(signal.SIGINT, sweep_file, tmp_path)
    storage, first, interrupted = stopped.storage, stopped.first, stopped.interrupted

    stopped.release.touch()  # the continued trial must not hold again
    again = subprocess.run(
        stopped.cmd, env=cli_env(), capture_output=True, text=True, timeout=600, check=False
    )
    assert again.returncode == 0, again.stderr[-2000:]
    study = optuna.load_study(study_name="interrupted", storage=storage.optuna)
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 3
    assert study.trials[0].datetime_complete == first.datetime_complete  # not redone
    assert study.trials[1].params == {"x": pytest.approx(interrupted.params["x"])}
    resumed = storage.trials.get("interrupted", 1)
    assert resumed.attempts == 2 and resumed.mlflow_run_id == interrupted.mlflow_run_id
    assert "resumes from its checkpoint" in Path(resumed.log_path).read_text()

    client = MlflowClient(tracking_uri=stopped.mlflow_uri)
    run = client.get_run(resumed.mlflow_run_id)
    assert run.info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "loss")]
    assert sorted(steps) == list(range(10, 201, 10)), "a step was lost or reported twice"
    sizes = client.get_metric_history(run.info.run_id, "world_size")
    assert sorted((m.step, m.value) for m in sizes) == [(s, 2.0) for s in range(10, 201, 10)]
    assert resumed.sizes == [[10, 2]], "both launches ran at 2 ranks: one size, from step 10"
