"""The controller's tracker creates a trial's MLflow run off the controller's thread."""

from __future__ import annotations

import sqlite3
import threading
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


def test_the_best_so_far_curve_is_written_in_one_request_for_trials_ended_meanwhile(
    tmp_path: Path,
) -> None:
    """Trials that end while MLflow is busy add their points to one write, not one each; the
    curve is the same (one point per completed trial, the best so far at each), and the
    store is in WAL mode (one disk sync per commit)."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = SweepTracker(uri, "best-curve", tmp_path / "runs")
    assert sqlite3.connect(tmp_path / "mlflow.db").execute("PRAGMA journal_mode").fetchone() == (
        "wal",
    )
    config = {"name": "best-curve", "objective": {"metric": "loss", "mode": "min"}}
    parent = tracker.start_parent("best-curve", None, config)
    busy = threading.Event()
    tracker.outbox.put("MLflow busy", lambda: busy.wait(10))
    calls = []
    log_batch = tracker.client.log_batch
    tracker.client.log_batch = lambda *a, **k: calls.append(k) or log_batch(*a, **k)
    for i, loss in enumerate([0.9, 0.7, 0.8, 0.4, 0.6]):
        tracker.best.add({"loss": loss}, now=1000 + i)
    busy.set()
    assert tracker.wait()
    assert len(calls) == 1 and len(calls[0]["metrics"]) == 5
    tracker.best.add({"loss": 0.5}, now=2000)  # a later one: its own write, nothing twice
    assert tracker.close()
    history = MlflowClient(uri).get_metric_history(parent, "best/loss")
    assert sorted((m.step, m.value) for m in history) == [
        (1, 0.9), (2, 0.7), (3, 0.7), (4, 0.4), (5, 0.4), (6, 0.4)
    ]  # fmt: skip
