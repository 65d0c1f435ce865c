"""A running trial's reports reach MLflow from its controller; the trial never imports MLflow.

One trial of the ``gated`` workload holds at step 2 until the test opens its gate. While it
holds, its points at steps 1 and 2 appear in its run on a real ``mlflow server``: the
controller shipped them from the trial's spool (``SweepTracker.ship_running``). At its end the
trial's process lists the MLflow modules it imported: none, in-process and as a warm torchrun
trial alike (an import costs a trial process about 1.5 s of CPU). Afterwards every step is in
the run once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from hyperfleet.platform.storage import Storage
from tests.integration.cli import STORE_POLL_S
from tests.tracking import readback
from tests.tracking.server import MlflowServer

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("devices", [0, 1], ids=["in-process", "warm"])
def test_a_running_trials_reports_reach_mlflow_and_the_trial_never_imports_it(
    tmp_path: Path, mlflow_server: MlflowServer, devices: int
) -> None:
    gates = tmp_path / "gates"
    name = f"live-{devices}"
    trial = {"steps": 3, "params": {"gates": str(gates), "hold_at": 2},
             "resources": {"devices": devices}}  # fmt: skip
    if devices:
        trial["parallel"] = {"data": 1}
    path = readback.sweep_file(tmp_path, name, mlflow_server.uri, {
        "budget": {"trials": 1, "max_concurrent": 1}, "trial": trial,
    })  # fmt: skip
    proc = readback.start_sweep(path, "--devices", "cpu:1")
    client = MlflowClient(mlflow_server.uri)
    storage = Storage(f"sqlite:///{tmp_path / 'hf.db'}", create=False)

    def logged() -> list[int]:
        rows = storage.trials.of(name) if (tmp_path / "hf.db").exists() else []
        run_id = rows[0].mlflow_run_id if rows else None
        if not run_id or run_id.startswith("pending:"):
            return []
        return [s for s, _ in readback.history(client, run_id, "loss")]

    readback.wait_for((gates / "held-0").exists, proc, "trial 0 to hold at step 2")
    readback.wait_for(lambda: logged() == [1, 2], proc, "its points in MLflow while it holds",
             every=STORE_POLL_S)  # fmt: skip
    assert storage.trials.of(name)[0].state == "RUNNING"
    (gates / "go-0").touch()
    _out, err = proc.communicate(timeout=readback.SWEEP_TIMEOUT_S)
    assert proc.returncode == 0, err[-4000:]

    assert (gates / "modules-0").read_text() == "", "the trial's process imported MLflow"
    run = client.get_run(storage.trials.of(name)[0].mlflow_run_id)
    assert [s for s, _ in readback.history(client, run.info.run_id, "loss")] == [1, 2, 3]
    readback.assert_unique_steps(client, run)
    assert run.info.status == "FINISHED"
