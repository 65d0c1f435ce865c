"""A script trial's program that asks for its context with ``hyperfleet.trial()``: pruned at
its own report, resumed from its own checkpoint after ``sweep run`` is interrupted, and a PBT
member that exploits in place or is paused and resumed."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hyperfleet.platform.storage import Storage
from hyperfleet.spec.states import TrialState
from tests.integration.cli import cli_env, wait_until
from tests.integration.test_script_trials import (
    PROGRAMS,
    PRUNED_PAIR,
    run_json,
    run_pruned_pair,
    script_sweep,
)

pytestmark = pytest.mark.slow
PUSH = ["python", str(PROGRAMS / "push.py"), "${args}"]


def push_sweep(
    tmp_path: Path, mlflow_template: Path, name: str, args: list[str], steps: int, **sections: Any
) -> Path:
    """A sweep of the push program (``PUSH`` + ``args``), minimising the ``loss`` it pushes
    through ``hyperfleet.trial()`` for ``steps`` steps."""
    trial = {"command": [*PUSH, *args], "params": {}, "steps": steps, "metrics": {"from": "push"}}
    objective = {"metric": "loss", "mode": "min"}
    return script_sweep(
        tmp_path, mlflow_template, name=name, objective=objective, trial=trial, **sections
    )


def test_program_is_pruned_at_its_report(tmp_path: Path, mlflow_template: Path) -> None:
    path = push_sweep(
        tmp_path,
        mlflow_template,
        "push-pruned",
        [],
        3,
        **PRUNED_PAIR,
    )
    _, (first, pruned) = run_pruned_pair(path, (0.3, 1.0))
    assert first.state == TrialState.COMPLETE and first.last_step == 3
    assert first.metrics["loss"] == pytest.approx(1 / 3)
    assert pruned.state == TrialState.PRUNED and pruned.last_step == 1
    assert pruned.trial_dir is not None
    log = (Path(pruned.trial_dir) / "log.txt").read_text()
    assert "Traceback" not in log, log  # a prune ends the program quietly


def test_program_resumes_from_its_checkpoint_after_interrupt(
    tmp_path: Path, mlflow_template: Path
) -> None:
    hold = tmp_path / "hold"
    hold.mkdir()
    path = push_sweep(
        tmp_path,
        mlflow_template,
        "push-resume",
        ["--hold", str(hold)],
        4,
        budget={"trials": 1, "max_concurrent": 1},
    )
    cmd = [sys.executable, "-m", "hyperfleet.platform", "sweep", "run", str(path), "--json"]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env()
    )
    wait_until(lambda: (hold / "held").exists(), "the program held after step 2", proc, 300)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130, proc.communicate()[1][-2000:]
    held = int((hold / "held").read_text())
    assert not Path(f"/proc/{held}").exists(), "the interrupted program outlived the sweep"

    result = run_json(path)
    assert result["state_counts"] == {"COMPLETE": 1, "PRUNED": 0, "FAIL": 0}
    storage = Storage(f"sqlite:///{tmp_path / 'runs' / 'hf.db'}", create=False)
    (trial,) = storage.trials.of("push-resume")
    storage.close()
    assert trial.last_step == 4 and trial.trial_dir is not None
    log = (Path(trial.trial_dir) / "log.txt").read_text()
    assert "starts at step 0" in log and "starts at step 2" in log, log


def test_pbt_sweep_of_a_program_exploits_and_pauses(tmp_path: Path, mlflow_template: Path) -> None:
    """Two members time-share one slot: member 0 pauses at step 2 (the other trained less),
    member 1 reaches step 2 worse and exploits it in place (the program starts again from the
    donor's checkpoint), and member 0 resumes from its own checkpoint."""
    from hyperfleet.platform.storage.population import SqlPopulationStore

    path = push_sweep(
        tmp_path,
        mlflow_template,
        "push-pbt",
        [],
        4,
        scheduler={
            "type": "pbt",
            "population": 2,
            "perturbation_interval": 2,
            "quantile_fraction": 0.25,  # of 2 members: the worse one exploits the better one
            "seed": 0,
            "initial": [{"x": 0.3}, {"x": 0.9}],
        },
        budget={"trials": None, "max_concurrent": 1},
    )
    result = run_json(path)
    assert result["state_counts"] == {"COMPLETE": 2, "PRUNED": 0, "FAIL": 0}
    storage = Storage(f"sqlite:///{tmp_path / 'runs' / 'hf.db'}", create=False)
    paused, exploiter = storage.trials.of("push-pbt")
    events = SqlPopulationStore(storage.engine).lineage("push-pbt")
    storage.close()
    assert [paused.last_step, exploiter.last_step] == [4, 4]
    assert [(e.kind, e.member) for e in events if e.kind == "exploit"] == [("exploit", 1)]
    assert paused.trial_dir is not None and exploiter.trial_dir is not None
    log = (Path(exploiter.trial_dir) / "log.txt").read_text()
    assert "exploit; the program starts again from step 2" in log, log
    assert "trial 1 starts at step 2 with x=" in log  # from the donor's checkpoint
    log = (Path(paused.trial_dir) / "log.txt").read_text()
    assert paused.attempts == 2 and "hyperfleet: time-sharing" in log, log
    assert "trial 0 starts at step 2 with x=0.3" in log, "not resumed from its own checkpoint"
