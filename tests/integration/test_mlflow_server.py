"""A sweep browsed in MLflow as a new user would, against a real ``mlflow server`` (SQLite
backend, proxied artifacts), read back over HTTP through ``MlflowClient``.

* the experiment opens MLflow's model-training view; its artifacts are the server's
  (``mlflow-artifacts:``), not a path of the machine that created it;
* the sweep's run: search space, scheduler, budget as params, the sweep file, a best-so-far
  curve, state counts, the best trial named;
* each trial's run: ``trial-0007 lr=.. hidden=..``, only its workload params, config, spec
  and log as artifacts, step curves with each step once, system metrics, host and devices;
* the best trial's run is marked and holds its model (``mlflow.pytorch.load_model`` loads it;
  registered under ``tracking.register_model``);
* running the finished sweep again changes nothing in MLflow.
"""

from __future__ import annotations

import re
from pathlib import Path

import mlflow
import numpy as np
import pytest
import torch
from mlflow.tracking import MlflowClient

from tests.tracking.readback import (
    assert_unique_steps,
    children,
    download_json,
    history,
    run_sweep,
    snapshot,
    sweep_file,
)
from tests.tracking.server import MlflowServer

# the digits sweep's run against a tracking server: test_sweep_digits shows it with a local store
pytestmark = [pytest.mark.slow, pytest.mark.long]


def test_digits_sweep_in_mlflow_and_a_rerun_changes_nothing(
    tmp_path: Path,
    mlflow_server: MlflowServer,
) -> None:
    path = sweep_file(
        tmp_path,
        "digits-ui",
        mlflow_server.uri,
        {
            "objective": {"metric": "val_accuracy", "mode": "max"},
            "budget": {"trials": 3, "max_concurrent": 2},
            "space": {
                "lr": {"type": "float", "low": 3e-3, "high": 3e-2, "log": True},
                "hidden": {"type": "int", "low": 16, "high": 48},
            },
            "trial": {
                "workload": "digits",
                "params": {"batch_size": 64},
                "steps": 40,
                "eval_every": 20,
            },
            "tracking": {"register_model": "digits-ui-best"},
        },
    )
    result, err = run_sweep(path)
    client = MlflowClient(mlflow_server.uri)
    exp_id = result["mlflow"]["experiment_id"]
    parent_id = result["mlflow"]["parent_run_id"]
    lines = err.splitlines()
    link = lines[lines.index("Open MLflow:") + 1]  # on a line of its own, to copy whole
    assert link.strip().startswith(f"{mlflow_server.uri}/#/experiments/{exp_id}"), err[-2000:]

    experiment = client.get_experiment(exp_id)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    assert experiment.artifact_location.startswith("mlflow-artifacts:")

    parent = client.get_run(parent_id)
    assert parent.info.status == "FINISHED" and parent.info.run_name == "digits-ui"
    params = parent.data.params
    assert (
        params["space.lr"] == "float [0.003, 0.03] log" and params["space.hidden"] == "int [16, 48]"
    )
    assert params["scheduler"] == "random" and params["budget.trials"] == "3"
    assert params["objective"] == "val_accuracy (max)"
    assert parent.data.metrics["trials/complete"] == 3.0
    best_curve = [v for _, v in history(client, parent_id, "best/val_accuracy")]
    assert len(best_curve) == 3 and best_curve == sorted(best_curve)
    assert best_curve[-1] == pytest.approx(result["best"]["value"])
    sweep_files = {a.path for a in client.list_artifacts(parent_id, "sweep")}
    assert sweep_files == {"sweep/digits-ui.yaml", "sweep/resolved.json"}

    trials = children(client, exp_id, parent_id)
    assert sorted(trials) == [0, 1, 2]
    for number, run in trials.items():
        assert run.info.status == "FINISHED" and run.data.tags["hyperfleet.state"] == "COMPLETE"
        assert re.fullmatch(rf"trial-{number:04d} lr=\S+ hidden=\d+", run.info.run_name)
        assert set(run.data.params) == {"lr", "hidden", "act", "batch_size", "weight_decay", "seed"}
        assert [s for s, _ in history(client, run.info.run_id, "val_accuracy")] == [20, 40]
        assert_unique_steps(client, run)
        assert "system/cpu_utilization_percentage" in run.data.metrics
        assert run.data.tags["hyperfleet.devices"] == "cpu" and run.data.tags["hyperfleet.host"]
        assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {
            "config.json",
            "spec.json",
            "log.txt",
        }
        assert run.data.metrics["final/val_accuracy"] == run.data.metrics["val_accuracy"]
    config = download_json(client, trials[0].info.run_id, "config.json", tmp_path / "dl")
    assert config["steps"] == 40 and config["params"]["batch_size"] == 64

    best = result["best"]["number"]
    marked = [n for n, r in trials.items() if r.data.tags.get("hyperfleet.best") == "true"]
    assert marked == [best] and parent.data.tags["hyperfleet.best_trial"] == str(best)
    model_uri = trials[best].data.tags["hyperfleet.model"]
    mlflow.set_tracking_uri(mlflow_server.uri)
    model = mlflow.pytorch.load_model(model_uri)
    logits = model(torch.from_numpy(np.zeros((3, 64), dtype=np.float32)))
    assert tuple(logits.shape) == (3, 10)
    versions = client.search_model_versions("name = 'digits-ui-best'")
    assert [v.run_id for v in versions] == [trials[best].info.run_id]

    before = snapshot(client, exp_id)
    again, _ = run_sweep(path)  # a finished sweep, run once more
    assert again["state_counts"] == result["state_counts"]
    assert snapshot(client, exp_id) == before
