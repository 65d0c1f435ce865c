"""Script trials resized by ``sweep run`` on two CPU slots, ``devices: {min: 1, max: 2}`` and
``resizable: true``: each starts at one device, the idle slot makes the policy grow it to two
at a report, and it is relaunched under torchrun at two ranks, the same trial directory and
MLflow run, where it resumes from its own checkpoint.

* A program that knows nothing of hyperfleet (``tests/launcher/programs/resumable.py``: gloo
  ranks, its state in ``${checkpoint_dir}``) reports on its output: the runner ends it as
  paused (not failed) at the resize's report, and records the report it printed while it
  ended (it finishes a step on SIGTERM).
* A program that reports through ``hyperfleet.trial()`` (``programs/push.py``) is answered
  PAUSE in its own ``report`` and resumes from ``load_checkpoint()``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from mlflow.tracking import MlflowClient

from hyperfleet.platform.storage import Storage, TrialRecord
from hyperfleet.spec.states import TrialState
from hyperfleet.testing.sweeps import minimal_sweep
from tests.integration.cli import cli

pytestmark = pytest.mark.slow
PROGRAMS = Path(__file__).resolve().parents[1] / "launcher" / "programs"
STEPS = 30


def _grown(tmp_path: Path, mlflow_template: Path, name: str, **trial: Any) -> TrialRecord:
    """Run a one-trial sweep of the script ``trial`` with ``sweep run --devices cpu:2``; its
    trial's record, checked: complete, one launch at 1 (paused) and one at 2, each step once
    in its one MLflow run at the size storage says."""
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "mlflow.db").write_bytes(mlflow_template.read_bytes())
    data = minimal_sweep(
        name=name,
        scheduler={"type": "random", "seed": 0},
        space={"x": {"type": "categorical", "choices": [0.5]}},
        budget={"trials": 1, "max_concurrent": 1},
        trial={"workload": None, "steps": STEPS, "resizable": True,
               "resources": {"devices": {"min": 1, "max": 2}}, **trial},
        storage=f"sqlite:///{runs / 'hf.db'}",
        tracking={"uri": f"sqlite:///{runs / 'mlflow.db'}", "log_model": False},
        workdir=str(runs),
    )  # fmt: skip
    data["objective"] = {"metric": "val_loss" if name == "stdout" else "loss", "mode": "min"}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))

    proc = cli("sweep", "run", str(path), "--devices", "cpu:2", "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["state_counts"]["COMPLETE"] == 1, result

    storage = Storage(f"sqlite:///{runs / 'hf.db'}", create=False)
    rec = storage.trials.get(name, 0)
    leases = sorted(storage.leases.all(name), key=lambda lease: lease.id)
    storage.close()
    assert rec is not None and rec.state == TrialState.COMPLETE, rec
    assert rec.last_step == STEPS and rec.retries == 0
    # one launch at 1 device, paused for the resize (not failed), then one at 2
    assert [r for _, r in rec.sizes or []] == [1, 2], rec.sizes
    assert 1 < (rec.sizes or [])[1][0] <= STEPS
    assert [len(lease.devices) for lease in leases] == [1, 2]
    assert leases[0].state == TrialState.PAUSED

    client = MlflowClient(f"sqlite:///{runs / 'mlflow.db'}")
    exp = client.get_experiment_by_name(name)
    assert exp is not None
    children = [
        r for r in client.search_runs([exp.experiment_id]) if "mlflow.parentRunId" in r.data.tags
    ]
    assert [r.info.run_id for r in children] == [rec.mlflow_run_id]
    world = sorted(client.get_metric_history(rec.mlflow_run_id, "world_size"), key=lambda m: m.step)
    assert [m.step for m in world] == list(range(1, STEPS + 1))
    assert [int(m.value) for m in world] == [rec.size_at(m.step) for m in world]
    assert "ScriptError" not in (Path(rec.trial_dir) / "log.txt").read_text()
    return rec


def test_a_program_reporting_on_its_output_grows_from_its_checkpoint_dir(
    tmp_path: Path, mlflow_template: Path
) -> None:
    command = ["python", str(PROGRAMS / "resumable.py"), "--steps", "${steps}",
               "--checkpoint-dir", "${checkpoint_dir}", "--wait", "0.3", "--finish-on-sigterm",
               "${args}"]  # fmt: skip
    rec = _grown(tmp_path, mlflow_template, "stdout", command=command)
    client = MlflowClient(f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    history = {
        name: sorted(client.get_metric_history(rec.mlflow_run_id, name), key=lambda m: m.step)
        for name in ("val_loss", "world")
    }
    # the curve of a program that never stopped, each step once: x + 1 / step
    assert [m.step for m in history["val_loss"]] == list(range(1, STEPS + 1))
    for m in history["val_loss"]:
        assert m.value == pytest.approx(0.5 + 1 / m.step, abs=1e-6)
    # the WORLD_SIZE the program ran at, at every step, is the size recorded there
    assert [int(m.value) for m in history["world"]] == [
        rec.size_at(m.step) for m in history["world"]
    ]
    log = (Path(rec.trial_dir) / "log.txt").read_text()
    paused = re.findall(r"resize to 2 devices at step (\d+); the program ended", log)
    assert len(paused) == 1, log[-3000:]
    # stopped at that report, it finished one more step (saved, reported) before it ended:
    # that report was recorded by the launch at 1, so the relaunch, resuming after it, lost
    # no step (the val_loss steps above)
    assert int(paused[0]) + 1 < (rec.sizes or [])[1][0]


def test_a_program_reporting_through_hyperfleet_trial_grows(
    tmp_path: Path, mlflow_template: Path
) -> None:
    command = ["python", str(PROGRAMS / "push.py"), "--wait", "0.3"]
    rec = _grown(tmp_path, mlflow_template, "push", command=command, metrics={"from": "push"})
    log = (Path(rec.trial_dir) / "log.txt").read_text()
    assert "at WORLD_SIZE=1" in log and "[rank0]:reported step" in log
    assert re.search(r"\[rank1\]:reported step \d+ at WORLD_SIZE=2", log), log[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    loss = sorted(client.get_metric_history(rec.mlflow_run_id, "loss"), key=lambda m: m.step)
    assert [m.step for m in loss] == list(range(1, STEPS + 1))
    for m in loss:
        assert m.value == pytest.approx((0.5 - 0.3) ** 2 + 1 / m.step, abs=1e-6)
