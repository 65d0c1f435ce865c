"""Interrupting ``sweep run`` (SIGINT or SIGTERM) stops every trial process, leaves no trial
RUNNING, and the same command continues the sweep to its budget without redoing COMPLETE
trials; the interrupted trial resumes from its checkpoint as the same trial and MLflow run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient

from hyperfleet.platform.storage import Storage

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def trial_processes() -> list[int]:
    """PIDs of live hyperfleet trial processes (torchrun agents and workers)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            state = (entry / "stat").read_text().split()[2]
        except OSError:
            continue
        if b"hyperfleet.platform.trial_entry" in cmd and state != "Z":
            pids.append(int(entry.name))
    return pids


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_and_continue(
    sig: signal.Signals, sweep_file: Callable[..., Path], tmp_path: Path
) -> None:
    assert not trial_processes(), "another test left trial processes behind"
    path = sweep_file(
        {
            "name": "interrupted",
            "objective": {"metric": "loss", "mode": "min"},
            "scheduler": {"type": "random", "seed": 3},
            "budget": {"trials": 3, "max_concurrent": 1},
            "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
            "trial": {
                "workload": "tests.integration.workloads:quadratic",
                "params": {"sleep": 0.05},
                "steps": 200,
                "eval_every": 10,
                "resources": {"devices": 2},
                "parallel": {"data": 2},
            },
        }
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
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    storage = Storage(db)

    def second_trial_running() -> bool:
        if storage.get_sweep("interrupted") is None:
            return False
        t = storage.get_trial("interrupted", 1)
        return t is not None and t.state == "RUNNING" and (t.last_step or 0) >= 30

    try:
        wait_for(second_trial_running, 300, "trial 1 to report past step 30")
    except AssertionError:
        proc.kill()
        raise
    first = optuna.load_study(study_name="interrupted", storage=storage.optuna).trials[0]
    assert first.state.name == "COMPLETE"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert json.loads(out.strip().splitlines()[-1])["interrupted"] is True
    assert not trial_processes(), "trial processes outlived the sweep"
    study = optuna.load_study(study_name="interrupted", storage=storage.optuna)
    states = [t.state.name for t in study.trials]
    assert "RUNNING" not in states
    assert states == ["COMPLETE", "WAITING"]
    interrupted = storage.get_trial("interrupted", 1)
    assert interrupted.state == "WAITING"
    reported_before = interrupted.last_step

    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert again.returncode == 0, again.stderr[-2000:]
    study = optuna.load_study(study_name="interrupted", storage=storage.optuna)
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 3
    assert study.trials[0].datetime_complete == first.datetime_complete  # not redone
    assert study.trials[1].params == {"x": pytest.approx(interrupted.params["x"])}
    resumed = storage.get_trial("interrupted", 1)
    assert resumed.attempts == 2 and resumed.mlflow_run_id == interrupted.mlflow_run_id
    assert "resumes from its checkpoint" in Path(resumed.log_path).read_text()

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    run = client.get_run(resumed.mlflow_run_id)
    assert run.info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "loss")]
    assert sorted(steps) == list(range(10, 201, 10)), "a step was lost or reported twice"
    assert reported_before >= 30
