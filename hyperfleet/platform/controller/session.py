"""A sweep as a controller runs it: created or continued in storage, with its scheduler and
its MLflow parent run; and closed again (summary, lineage, the parent run's end, the status)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.lineage import log_sweep_lineage
from hyperfleet.platform.paths import replica_folder
from hyperfleet.platform.results import SweepSummary, summarize
from hyperfleet.platform.schedulers import Scheduler, build_scheduler
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.tracking import Tracker


@dataclass
class SweepSession:
    """One open sweep: what the controller and trial preparation read."""

    cfg: SweepConfig
    storage: Storage
    scheduler: Scheduler
    tracker: Tracker
    parent_run_id: str
    created_at: float
    tracking_uri: str | None

    @property
    def name(self) -> str:
        return self.cfg.name

    @property
    def workdir(self) -> Path:
        return Path(self.cfg.workdir).resolve()

    def replica(self) -> str | None:
        """The sweep's checkpoint replica folder (None without ``checkpoint.replica``)."""
        root = self.cfg.trial.checkpoint.replica
        return None if root is None else str(replica_folder(root, self.name, self.created_at))


def open_session(
    cfg: SweepConfig, storage: Storage, tracker: Tracker, tracking_uri: str | None
) -> SweepSession:
    """Create the sweep (or continue it when its name is stored), its scheduler and its
    parent run; the sweep's status becomes ``running``. Safe when several processes open the
    same new sweep at once: under the sweep's claim lock, one creates, the others continue."""
    with storage.claim_lock(cfg.name):
        return _open(cfg, storage, tracker, tracking_uri)


def _open(
    cfg: SweepConfig, storage: Storage, tracker: Tracker, tracking_uri: str | None
) -> SweepSession:
    name = cfg.name
    config = cfg.model_dump(mode="json")
    row = storage.get_sweep(name) or storage.create_sweep(name, config)
    if row.config.get("space") != config["space"]:
        raise ConfigError(
            f"space: differs from the stored sweep {name!r}; "
            f"a continued sweep keeps its space, so use a new name"
        )
    scheduler = build_scheduler(cfg, storage, create=True)
    parent = tracker.start_parent(name, row.mlflow_parent_run_id, config)
    storage.update_sweep(
        name,
        status="running",
        mlflow_experiment_id=tracker.experiment_id,
        mlflow_parent_run_id=parent,
    )
    # created_at as stored (not the in-memory value of a row just created): every reader, on
    # any host, derives the same replica folder from it
    stored = storage.get_sweep(name)
    assert stored is not None
    return SweepSession(cfg, storage, scheduler, tracker, parent, stored.created_at, tracking_uri)


def close_session(session: SweepSession, interrupted: bool) -> SweepSummary:
    """The sweep's summary. Unless another controller still runs trials of it: its lineage
    and best trial logged, the parent run ended, and its status ``done`` (or ``interrupted``)."""
    name = session.name
    summary = summarize(session.storage, name, interrupted=interrupted)
    if any(t.state == "RUNNING" for t in summary.trials):  # others are still at work on it
        session.storage.close()
        return summary
    best = summary.best()
    if session.cfg.is_population and session.tracking_uri is not None:
        log_sweep_lineage(session.tracker, session.parent_run_id, session.storage, name)
    session.tracker.end_parent(
        session.parent_run_id,
        "KILLED" if interrupted else "FINISHED",
        {"number": best.number, "value": best.values[0]} if best and best.values else None,
    )
    session.storage.update_sweep(name, status="interrupted" if interrupted else "done")
    session.storage.close()
    return summary
