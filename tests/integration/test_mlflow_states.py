"""Trial states as MLflow shows them, and the marks of a multi-objective sweep, against a real
``mlflow server``.

* pruned is not failed: a pruned trial's run is FINISHED, tagged PRUNED, with
  ``pruned_at_step``; a failed one is FAILED with its error as the run's description;
* a trial stopped by an interrupt is SCHEDULED (it will continue), tagged WAITING, with
  ``stopped_at_step``; the sweep's run too; running the sweep again resumes the same run to
  FINISHED with each step once;
* with two objectives, the runs on the Pareto front are tagged and the sweep's run has
  ``pareto/size`` after each completed trial.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from hyperfleet.platform.config import load_sweep
from hyperfleet.platform.sweeps.enqueue import enqueue
from tests.tracking.readback import (
    SWEEP_TIMEOUT_S,
    assert_unique_steps,
    children,
    history,
    run_sweep,
    start_sweep,
    sweep_file,
    wait_for,
)
from tests.tracking.server import MlflowServer

pytestmark = pytest.mark.slow


def queue(path: Path, xs: list[float]) -> None:
    cfg = load_sweep(path)
    for x in xs:
        enqueue(cfg, str(cfg.storage), {"x": x})


def test_pruned_failed_and_interrupted_trials(tmp_path: Path, mlflow_server: MlflowServer) -> None:
    gates = tmp_path / "gates"
    path = sweep_file(
        tmp_path,
        "states",
        mlflow_server.uri,
        {
            "pruner": {"type": "median", "n_startup_trials": 1, "n_warmup_steps": 0},
            "budget": {"trials": 4, "max_concurrent": 1},
            "trial": {"params": {"gates": str(gates), "hold_at": 2, "fail_above": 0.95}},
        },
    )
    # trial 0 completes; 1 is worse than it at step 1 (pruned); 2 fails; 3 holds at step 2
    queue(path, [0.3, 0.9, 0.99, 0.3])
    (gates / "go-0").touch()
    proc = start_sweep(path)
    wait_for((gates / "held-3").exists, proc, "trial 3 to hold at step 2")
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=SWEEP_TIMEOUT_S)
    assert proc.returncode == 130, err[-4000:]

    client = MlflowClient(mlflow_server.uri)
    exp = client.get_experiment_by_name("states")
    parent = client.search_runs([exp.experiment_id], "tags.`hyperfleet.kind` = 'sweep'")[0]
    assert parent.info.status == "SCHEDULED"
    assert parent.data.tags["hyperfleet.state"] == "INTERRUPTED"
    trials = children(client, exp.experiment_id, parent.info.run_id)
    done, pruned, failed, stopped = (trials[n] for n in range(4))
    assert (done.info.status, done.data.tags["hyperfleet.state"]) == ("FINISHED", "COMPLETE")
    assert (pruned.info.status, pruned.data.tags["hyperfleet.state"]) == ("FINISHED", "PRUNED")
    assert pruned.data.metrics["pruned_at_step"] == 1.0
    assert (failed.info.status, failed.data.tags["hyperfleet.state"]) == ("FAILED", "FAIL")
    assert "injected failure" in failed.data.tags["mlflow.note.content"]
    assert (stopped.info.status, stopped.data.tags["hyperfleet.state"]) == ("SCHEDULED", "WAITING")
    assert stopped.data.metrics["stopped_at_step"] == 2.0

    (gates / "go-3").touch()
    result, _ = run_sweep(path)
    assert result["state_counts"] == {"COMPLETE": 2, "PRUNED": 1, "FAIL": 1}
    parent = client.get_run(parent.info.run_id)
    assert parent.info.status == "FINISHED" and parent.data.tags["hyperfleet.state"] == "COMPLETE"
    assert parent.data.metrics["trials/pruned"] == 1.0 and parent.data.metrics["trials/fail"] == 1.0
    resumed = client.get_run(stopped.info.run_id)  # the same run, continued
    assert (resumed.info.status, resumed.data.tags["hyperfleet.state"]) == ("FINISHED", "COMPLETE")
    assert [s for s, _ in history(client, resumed.info.run_id, "loss")] == [1, 2, 3, 4]
    assert history(client, resumed.info.run_id, "stopped_at_step") == [(2, 2.0)]
    for run in children(client, exp.experiment_id, parent.info.run_id).values():
        assert_unique_steps(client, run)


def test_pareto_front_is_marked(tmp_path: Path, mlflow_server: MlflowServer) -> None:
    path = sweep_file(
        tmp_path,
        "pareto",
        mlflow_server.uri,
        {
            "objective": None,
            "objectives": [{"metric": "loss", "mode": "min"}, {"metric": "speed", "mode": "max"}],
            "budget": {"trials": 3, "max_concurrent": 1},
            "trial": {"steps": 2},
        },
    )
    queue(path, [0.3, 0.8, 0.1])  # 0: least loss; 1: fastest; 2: dominated by 0
    result, _ = run_sweep(path)
    assert sorted(t["number"] for t in result["pareto_front"]) == [0, 1]
    client = MlflowClient(mlflow_server.uri)
    parent_id = result["mlflow"]["parent_run_id"]
    trials = children(client, result["mlflow"]["experiment_id"], parent_id)
    marked = sorted(n for n, r in trials.items() if r.data.tags.get("hyperfleet.pareto") == "true")
    assert marked == [0, 1]
    parent = client.get_run(parent_id)
    assert parent.data.tags["hyperfleet.pareto_trials"] == "0,1"
    assert [v for _, v in history(client, parent_id, "pareto/size")] == [1.0, 2.0, 2.0]
    assert not any(r.data.tags.get("hyperfleet.best") for r in trials.values())
