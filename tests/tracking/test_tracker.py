"""The controller's tracker creates a trial's MLflow run off the controller's thread."""

from __future__ import annotations

import shutil
import sqlite3
import threading
from pathlib import Path

from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.tracking.base import ChildRun
from hyperfleet.platform.tracking.spool import Spool, is_pending
from hyperfleet.platform.tracking.tracker import SweepTracker
from hyperfleet.testing.sweeps import minimal_sweep


def test_a_trial_launches_with_a_placeholder_and_learns_its_run(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = SweepTracker(uri, "child-runs", tmp_path / "runs")
    config = parse_sweep(minimal_sweep(name="child-runs"))
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


def test_a_run_made_for_a_launch_that_did_not_happen_here_is_deleted_and_never_recorded(
    tmp_path: Path,
) -> None:
    """Its trial was requeued and taken by another worker between this worker's claim and its
    launch: the run created for it here is deleted (the trial's record names the other
    worker's run), and its id is not handed to storage; a later launch of the same trial here
    is tracked as usual."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = SweepTracker(uri, "disowned", tmp_path / "runs")
    config = parse_sweep(minimal_sweep(name="disowned"))
    parent = tracker.start_parent("disowned", None, config)
    run = ChildRun(
        sweep="disowned", parent_id=parent, number=4, params={"lr": 0.1}, sampled={"lr": 0.1},
        knobs={}, config={}, tags={}, prior_run_id=None, population=False,
    )  # fmt: skip
    tracker.child(run)
    tracker.disown(4)
    assert tracker.wait()
    assert tracker.take_created() == [], "not recorded: the trial is another worker's"
    client = MlflowClient(tracking_uri=uri)
    live = client.search_runs([tracker.experiment_id], "tags.`hyperfleet.trial` = '4'")
    assert live == [], "the run made here is deleted"
    given = tracker.child(run)  # claimed again later, and launched here this time
    assert tracker.wait()
    (number, real), *_ = tracker.take_created()
    assert number == 4 and client.get_run(real).info.lifecycle_stage == "active"
    tracker.end_child(given, "COMPLETE", {"loss": 0.5})
    assert tracker.close()


def test_the_best_so_far_curve_is_written_in_one_request_for_trials_ended_meanwhile(
    tmp_path: Path,
) -> None:
    """Trials that end while MLflow is busy add their points to one write, not one each; the
    curve is the same (one point per completed trial, the best so far at each); the store
    is in WAL mode with commits that do not wait for the disk while the sweep writes (other
    databases keep SQLite's default), and its file alone holds everything once the tracker
    closes."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = SweepTracker(uri, "best-curve", tmp_path / "runs")
    assert sqlite3.connect(tmp_path / "mlflow.db").execute("PRAGMA journal_mode").fetchone() == (
        "wal",
    )
    import sqlalchemy as sa  # this process's connections to the store: a sync per checkpoint

    for path, level in [(tmp_path / "mlflow.db", 1), (tmp_path / "other.db", 2)]:
        with sa.create_engine(f"sqlite:///{path}").connect() as conn:
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == level  # NORMAL, FULL
    config = parse_sweep(minimal_sweep(name="best-curve"))
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
    copy = tmp_path / "copy.db"  # closing folds the WAL back: the file alone holds every run
    shutil.copy(tmp_path / "mlflow.db", copy)
    history = MlflowClient(f"sqlite:///{copy}").get_metric_history(parent, "best/loss")
    assert sorted((m.step, m.value) for m in history) == [
        (1, 0.9), (2, 0.7), (3, 0.7), (4, 0.4), (5, 0.4), (6, 0.4)
    ]  # fmt: skip


def _member(parent: str, number: int, prior: str | None) -> ChildRun:
    return ChildRun(sweep="pbt", parent_id=parent, number=number, params={"lr": 0.1},
                    prior_run_id=prior, population=True)  # fmt: skip


def test_a_pause_that_mlflow_had_no_time_to_see_costs_only_its_reports(tmp_path: Path) -> None:
    """A PBT member paused and resumed while the outbox was busy: its run never shows the
    pause (no SCHEDULED, no ``stopped_at_step``, no status writes), its reports arrive once;
    a pause the outbox reached first is written as before (SCHEDULED, WAITING, then RUNNING)."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = SweepTracker(uri, "pbt", tmp_path / "runs")
    config = parse_sweep(minimal_sweep(name="pbt"))
    parent = tracker.start_parent("pbt", None, config)
    tracker.child(_member(parent, 0, None))
    assert tracker.wait()
    (_, run_id), *_ = tracker.take_created()
    spool = Spool(tmp_path / "runs" / "pbt" / "trial-0000" / "mlflow")
    status_writes = []
    update_run = tracker.client.update_run
    tracker.client.update_run = lambda *a, **k: status_writes.append(a) or update_run(*a, **k)

    busy = threading.Event()
    tracker.outbox.put("MLflow busy", lambda: busy.wait(10))
    spool.append([("loss", 0.5, 1000, 5)])
    tracker.end_child(run_id, "WAITING")
    assert tracker.child(_member(parent, 0, run_id)) == run_id  # resumed before it was written
    busy.set()
    assert tracker.wait()
    got = MlflowClient(tracking_uri=uri).get_run(run_id)
    assert (got.info.status, got.data.tags["hyperfleet.state"]) == ("RUNNING", "RUNNING")
    assert "stopped_at_step" not in got.data.metrics and status_writes == []
    assert got.data.metrics["loss"] == 0.5 and spool.unsent_bytes() == 0

    spool.append([("loss", 0.4, 2000, 10)])
    tracker.end_child(run_id, "WAITING")
    assert tracker.wait()  # the outbox reached this pause first: written as a pause
    got = MlflowClient(tracking_uri=uri).get_run(run_id)
    assert (got.info.status, got.data.tags["hyperfleet.state"]) == ("SCHEDULED", "WAITING")
    assert got.data.metrics["stopped_at_step"] == 10
    tracker.child(_member(parent, 0, run_id))
    tracker.end_child(run_id, "COMPLETE", {"loss": 0.4})
    assert tracker.close()
    got = MlflowClient(tracking_uri=uri).get_run(run_id)
    assert (got.info.status, got.data.tags["hyperfleet.state"]) == ("FINISHED", "COMPLETE")
    history = MlflowClient(tracking_uri=uri).get_metric_history(run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(5, 0.5), (10, 0.4)]


def test_running_trials_reports_are_shipped_by_the_controller_one_shipment_at_a_time(
    tmp_path: Path,
) -> None:
    """What a running trial spooled reaches its run through the tracker, at most every
    ``ship_every_s``; a trial the tracker cannot find a run for is passed over."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = SweepTracker(uri, "live", tmp_path / "runs", ship_every_s=0.0)
    parent = tracker.start_parent("live", None, parse_sweep(minimal_sweep(name="live")))
    run = ChildRun(sweep="live", parent_id=parent, number=0, params={"x": 0.5},
                   sampled={"x": 0.5}, knobs={}, config={}, tags={}, prior_run_id=None,
                   population=False)  # fmt: skip
    given = tracker.child(run)
    spool = Spool(tmp_path / "runs" / "live" / "trial-0000" / "mlflow")
    spool.append([("loss", 1.0, 1000, 1)], {})
    tracker.ship_running({0: given, 7: "pending:7"})  # 7: no run, nothing to make it from
    assert tracker.wait()
    real = tracker.take_created()[0][1]
    client = MlflowClient(tracking_uri=uri)
    assert [m.step for m in client.get_metric_history(real, "loss")] == [1]

    tracker.ship_every_s = 3600.0
    spool.append([("loss", 0.7, 2000, 2)], {})
    tracker.ship_running({0: given})  # shipped; the next one an hour from now
    assert tracker.wait()
    spool.append([("loss", 0.5, 3000, 3)], {})
    tracker.ship_running({0: given})
    assert tracker.wait()
    assert [m.step for m in client.get_metric_history(real, "loss")] == [1, 2]
    tracker.end_child(given, "COMPLETE", {"loss": 0.5})  # the end ships the rest
    assert tracker.close()
    assert [m.step for m in client.get_metric_history(real, "loss")] == [1, 2, 3]
