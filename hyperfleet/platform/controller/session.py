"""A sweep as a controller runs it: created or continued in storage, with its scheduler and
its MLflow parent run; and closed again (summary, lineage, the parent run's end, the status).

Continuing a sweep writes nothing to MLflow until one of its trials runs again, and closing
writes only what differs from what MLflow holds: running a finished sweep once more changes
nothing there (see :mod:`hyperfleet.platform.tracking.marks`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.controller.depth import first_fill
from hyperfleet.platform.schedulers import Scheduler, build_scheduler
from hyperfleet.platform.storage import Storage, TrialRecord
from hyperfleet.platform.storage.ownership import check_same_space, claim
from hyperfleet.platform.storage.paths import sweep_replica
from hyperfleet.platform.storage.results import SweepSummary, counted, summarize
from hyperfleet.platform.tracking import SweepView, Tracker
from hyperfleet.platform.tracking.lineage import log_sweep_lineage
from hyperfleet.platform.tracking.spool import is_pending
from hyperfleet.spec.states import SweepStatus, TrialState

logger = logging.getLogger(__name__)


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
        """The sweep's checkpoint replica folder or object store URL (None without
        ``checkpoint.replica``)."""
        root = self.cfg.trial.checkpoint.replica
        return None if root is None else sweep_replica(root, self.name, self.created_at)


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
    row = storage.sweeps.get(name)
    created = row is None
    check_same_space(cfg, row)  # also before anything is written (sweeps/run.py's preflight)
    if row is None:
        row = storage.sweeps.create(name, cfg.model_dump(mode="json"))
    # created_at as stored (not the in-memory value of a row just created): every reader, on
    # any host, derives the same identity and replica folder from it
    stored = storage.sweeps.get(name)
    assert stored is not None
    claim(cfg, stored.created_at, storage.url)  # its run directory: before any MLflow write
    scheduler = build_scheduler(cfg, storage, create=True)
    if created:
        first_fill(cfg, storage, scheduler)
    parent = tracker.start_parent(name, row.mlflow_parent_run_id, cfg)
    storage.sweeps.update(
        name, mlflow_experiment_id=tracker.experiment_id, mlflow_parent_run_id=parent
    )
    storage.lifecycle.worker_sets(name, SweepStatus.RUNNING)  # not over a user's pause or stop
    return SweepSession(cfg, storage, scheduler, tracker, parent, stored.created_at, tracking_uri)


def close_session(
    session: SweepSession, interrupted: bool, counts_only: bool = False, stopped: bool = False
) -> SweepSummary:
    """The sweep's summary. Unless another controller still runs trials of it (then only what
    this one queued for MLflow is written): its lineage, best trial and end written to MLflow
    (what MLflow cannot take now is left for ``hyperfleet mlflow sync``), and its status ended
    (never over a user's pause or stop). ``stopped``: a user stopped the sweep
    (``sweep stop``); its run ends KILLED, tagged as stopped.

    ``counts_only`` (a fleet's worker, ``hyperfleet worker``): the trials are counted, not
    read, where the sweep runs elsewhere still or another worker already ended it as this
    close would; the summary then holds the counts only (:func:`.results.counted`). A fleet's
    workers all leave a sweep as it ends: a thousand of them each reading every trial of a
    1,500-trial sweep kept a 2-core machine fully busy for two minutes."""
    name = session.name
    storage, tracker = session.storage, session.tracker
    if counts_only:
        counts = storage.trials.state_counts(name)
        row = storage.sweeps.get(name)
        ending = SweepStatus.INTERRUPTED if interrupted else SweepStatus.DONE
        if row is not None and (counts.get(TrialState.RUNNING) or row.status == ending):
            _mlflow_done(session, tracker.close(), None)
            storage.close()
            return counted(row, counts, interrupted)
    # the sweep's trials read once (a fleet's workers all close a sweep as it ends: each read
    # is of every trial)
    records = storage.trials.of(name)
    summary = summarize(storage, name, interrupted=interrupted, records=records)
    if any(t.state == TrialState.RUNNING for t in summary.trials):  # others are still at work on it
        _mlflow_done(session, tracker.close(), records)
        storage.close()
        return summary
    if session.cfg.is_population and session.tracking_uri is not None and tracker.active:
        log_sweep_lineage(tracker, session.parent_run_id, storage, name)
    view = SweepView(name, session.cfg, records, interrupted, stopped)
    status = "SCHEDULED" if interrupted else "FINISHED"  # an interrupted sweep continues later
    status = "KILLED" if stopped else status  # MLflow's status of a run a user ended
    _mlflow_done(session, tracker.end_parent(session.parent_run_id, status, view), records)
    ending = SweepStatus.INTERRUPTED if interrupted else SweepStatus.DONE
    storage.lifecycle.worker_sets(name, ending)
    storage.close()
    return summary


def leave_session(session: SweepSession) -> None:
    """Let go of the sweep without ending it (this controller stopped on an error): what it
    queued for MLflow is written, its status is left as it stands for other workers."""
    try:
        _mlflow_done(session, session.tracker.close(), None)
    finally:
        session.storage.close()


def _mlflow_done(
    session: SweepSession, synced: bool, records: Sequence[TrialRecord] | None
) -> None:
    """Storage learns the runs created after their trial launched (during an outage; of the
    sweep's ``records`` as read at its close, or read now if there are such runs and they
    were not); what MLflow did not take is named."""
    resolved = session.tracker.resolved()
    if resolved and records is None:
        records = session.storage.trials.of(session.name)
    for r in records or ():
        if is_pending(r.mlflow_run_id) and r.number in resolved:
            session.storage.trials.upsert(session.name, r.number, mlflow_run_id=resolved[r.number])
    if not synced:
        logger.warning(
            "MLflow did not take everything; when it is back: hyperfleet mlflow sync --storage %s",
            session.storage.url,
        )
