"""The controller's tracker creates a trial's MLflow run off the controller's thread."""

from __future__ import annotations

from pathlib import Path

from hyperfleet.platform.tracking.base import ChildRun
from hyperfleet.platform.tracking.spool import Spool, is_pending
from hyperfleet.platform.tracking.tracker import SweepTracker


def test_a_trial_launches_with_a_placeholder_and_learns_its_run(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = SweepTracker(uri, "child-runs", tmp_path / "runs")
    config = {"name": "child-runs", "objective": {"metric": "loss", "mode": "min"}}
    parent = tracker.start_parent("child-runs", None, config)
    run = ChildRun(
        sweep="child-runs",
        parent_id=parent,
        number=3,
        params={"lr": 0.1, "hidden": 32},
        sampled={"lr": 0.1},
        knobs={},
        config={"workload": "digits"},
        tags={},
        prior_run_id=None,
        population=False,
    )
    given = tracker.child(run)
    assert is_pending(given), "the launch must not wait for MLflow"
    assert tracker.wait()
    created = tracker.take_created()
    assert [n for n, _ in created] == [3]
    real = created[0][1]
    assert not is_pending(real) and tracker.take_created() == []
    spool = Spool(tmp_path / "runs" / "child-runs" / "trial-0003" / "mlflow")
    assert spool.run_id() == real, "the trial's sink finds the run in its spool folder"
    got = MlflowClient(tracking_uri=uri).get_run(real)
    assert got.data.tags["mlflow.parentRunId"] == parent
    assert got.data.tags["hyperfleet.trial"] == "3"
    assert got.data.params == {"lr": "0.1", "hidden": "32"}

    tracker.end_child(given, "COMPLETE", {"loss": 0.5})  # ended under its placeholder
    assert tracker.close()
    ended = MlflowClient(tracking_uri=uri).get_run(real)
    assert ended.info.status == "FINISHED" and ended.data.metrics["final/loss"] == 0.5
