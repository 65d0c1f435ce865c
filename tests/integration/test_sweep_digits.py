"""End to end: a digits sweep of 2-process DDP trials under torchrun, read back from storage
and MLflow."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from hyperfleet.platform.storage import Storage
from tests.integration.cli import cli, invoke

pytestmark = pytest.mark.slow


def test_digits_ddp_sweep_completes_and_is_logged(
    sweep_file: Callable[..., Path], tmp_path: Path
) -> None:
    import optuna
    from mlflow.tracking import MlflowClient

    path = sweep_file(
        {
            "name": "digits-e2e",
            "budget": {"trials": 4, "max_concurrent": 2},
            "trial": {"steps": 150},
        }
    )
    proc = cli("sweep", "run", str(path), "--json", "--devices", "cpu:4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["sweep"] == "digits-e2e"
    assert result["state_counts"] == {"COMPLETE": 4, "PRUNED": 0, "FAIL": 0}
    assert result["best"]["value"] >= 0.95
    assert set(result["best"]["params"]) == {"lr", "hidden"}

    # storage: every trial COMPLETE, each ran 2 ranks (its launch line in the log says so)
    storage = Storage(f"sqlite:///{tmp_path / 'runs' / 'hf.db'}")
    study = optuna.load_study(study_name="digits-e2e", storage=storage.optuna)
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 4
    for rec in storage.trials.of("digits-e2e"):
        log = Path(rec.log_path).read_text()
        assert "2 rank(s) on" in log and rec.last_step == 150  # a warm group of 2 ranks

    # MLflow: one parent, four children with step curves and final states
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    exp_id = result["mlflow"]["experiment_id"]
    runs = client.search_runs([exp_id], max_results=100)
    parent = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [
        r
        for r in runs
        if r.data.tags.get("mlflow.parentRunId") == result["mlflow"]["parent_run_id"]
    ]
    assert len(parent) == 1 and parent[0].info.run_id == result["mlflow"]["parent_run_id"]
    assert parent[0].info.status == "FINISHED"
    assert len(children) == 4
    # the best run is marked; with ``tracking.log_model: false`` (the tests' sweep file) no
    # export process ran and no model was logged
    best = [r for r in children if r.data.tags.get("hyperfleet.best") == "true"]
    assert len(best) == 1 and "hyperfleet.model" not in best[0].data.tags
    assert not list((tmp_path / "runs").rglob("export.log"))
    for child in children:
        assert child.info.status == "FINISHED"
        assert child.data.tags["hyperfleet.sweep"] == "digits-e2e"
        # the workload's params; the trial config is one artifact, not dozens of params
        assert {"lr", "hidden", "batch_size"} <= set(child.data.params)
        assert not any(k.startswith("trial.") for k in child.data.params)
        assert "config.json" in {a.path for a in client.list_artifacts(child.info.run_id)}
        history = client.get_metric_history(child.info.run_id, "val_accuracy")
        assert sorted(m.step for m in history) == [50, 100, 150]
        number = int(child.data.tags["hyperfleet.trial"])
        assert child.data.metrics["final/val_accuracy"] == pytest.approx(study.trials[number].value)

    status = invoke("sweep", "status", "digits-e2e", "--storage", storage.url, "--json")
    assert status.exit_code == 0, status.output
    assert json.loads(status.stdout)["state_counts"]["COMPLETE"] == 4
