"""A script trial resized by ``sweep run``: a program that knows nothing of hyperfleet
(``tests/launcher/programs/resumable.py``: gloo ranks under torchrun, its state in
``${checkpoint_dir}``) declared ``resizable``, on two CPU slots. It starts at one device;
the idle slot makes the policy grow it to two at a report; the runner ends the program as
paused there (not failed), and the controller relaunches it under torchrun at two ranks, the
same trial directory and MLflow run, where it resumes from its own checkpoint."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from hyperfleet.platform.storage import Storage
from hyperfleet.spec.states import TrialState
from hyperfleet.testing.sweeps import minimal_sweep
from tests.integration.cli import cli

pytestmark = pytest.mark.slow
PROGRAM = Path(__file__).resolve().parents[1] / "launcher" / "programs" / "resumable.py"
STEPS = 24


def test_a_script_trial_grows_1_to_2_and_resumes_from_its_checkpoint_dir(
    tmp_path: Path, mlflow_template: Path
) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "mlflow.db").write_bytes(mlflow_template.read_bytes())
    data = minimal_sweep(
        name="script-grow",
        objective={"metric": "val_loss", "mode": "min"},
        scheduler={"type": "random", "seed": 0},
        space={"x": {"type": "categorical", "choices": [0.5]}},
        budget={"trials": 1, "max_concurrent": 1},
        trial={
            "workload": None,
            "command": ["python", str(PROGRAM), "--steps", "${steps}", "--checkpoint-dir",
                        "${checkpoint_dir}", "--wait", "0.4", "${args}"],
            "steps": STEPS,
            "resizable": True,
            "resources": {"devices": {"min": 1, "max": 2}},
        },
        storage=f"sqlite:///{runs / 'hf.db'}",
        tracking={"uri": f"sqlite:///{runs / 'mlflow.db'}", "log_model": False},
        workdir=str(runs),
    )  # fmt: skip
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))

    proc = cli("sweep", "run", str(path), "--devices", "cpu:2", "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["state_counts"]["COMPLETE"] == 1, result

    storage = Storage(f"sqlite:///{runs / 'hf.db'}", create=False)
    rec = storage.trials.get("script-grow", 0)
    leases = sorted(storage.leases.all("script-grow"), key=lambda lease: lease.id)
    storage.close()
    assert rec is not None and rec.state == TrialState.COMPLETE, rec
    assert rec.last_step == STEPS and rec.retries == 0
    assert rec.metrics["val_loss"] == pytest.approx(0.5 + 1 / STEPS, abs=1e-6)
    # one launch at 1 device, paused for the resize (not failed), then one at 2
    assert [r for _, r in rec.sizes or []] == [1, 2], rec.sizes
    grew_at = (rec.sizes or [])[1][0]
    assert 1 < grew_at <= STEPS
    assert [len(lease.devices) for lease in leases] == [1, 2]
    assert leases[0].state == TrialState.PAUSED

    # one MLflow run; each step once, at the size storage says and the program saw
    client = MlflowClient(f"sqlite:///{runs / 'mlflow.db'}")
    exp = client.get_experiment_by_name("script-grow")
    assert exp is not None
    children = [
        r for r in client.search_runs([exp.experiment_id]) if "mlflow.parentRunId" in r.data.tags
    ]
    assert [r.info.run_id for r in children] == [rec.mlflow_run_id]
    history = {
        name: sorted(client.get_metric_history(rec.mlflow_run_id, name), key=lambda m: m.step)
        for name in ("val_loss", "world", "world_size")
    }
    for name, points in history.items():
        assert [m.step for m in points] == list(range(1, STEPS + 1)), name
    # the curve of a program that never stopped: x + 1 / step at every step
    for m in history["val_loss"]:
        assert m.value == pytest.approx(0.5 + 1 / m.step, abs=1e-6)
    for seen, recorded in zip(history["world"], history["world_size"], strict=True):
        assert int(seen.value) == int(recorded.value) == rec.size_at(seen.step)
    log = (Path(rec.trial_dir) / "log.txt").read_text()
    paused = re.findall(r"resize to 2 devices at step (\d+); the program ended", log)
    assert len(paused) == 1, log[-3000:]
    # the reports it printed before it ended were recorded by that launch, none after
    assert int(paused[0]) < grew_at
    assert "ScriptError" not in log
