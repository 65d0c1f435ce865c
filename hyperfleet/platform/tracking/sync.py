"""``hyperfleet mlflow sync``: make MLflow hold everything storage and the spools hold.

A sweep may end while its tracking server is away (the controller waits for it only so long),
or its controller may die with writes queued. Nothing is lost: every report is in its trial's
spool and every state in storage. Sync rebuilds what MLflow should show from them, through the
same idempotent writes the controller uses (:mod:`.tracker`), so it can run any number of
times and adds nothing twice:

* a trial whose run was never created (launched during an outage) gets it, with its params,
  config and launch time, and storage learns its id;
* each trial's spool is sent (what is already in MLflow is not sent again);
* each ended trial's run gets its end state, final metrics and files if it lacks them;
* the sweep's run gets its marks, counts and end; the best trial's model if it has none.

A sweep still running elsewhere only has its spools sent (its controller ends its runs).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.config.suggest import did_you_mean
from hyperfleet.platform.credentials import masked
from hyperfleet.platform.storage import Storage, TrialRecord
from hyperfleet.platform.tracking.base import ChildRun, SweepView
from hyperfleet.platform.tracking.records import objectives
from hyperfleet.platform.tracking.spool import is_pending
from hyperfleet.platform.tracking.tracker import SweepTracker
from hyperfleet.platform.urls import local_tracking
from hyperfleet.spec.states import SweepStatus, TrialState
from hyperfleet.spec.wire import SPEC_FILE

ENDED = frozenset(TrialState) - {TrialState.RUNNING, TrialState.LOST}
"""States of a trial whose run has (for now) ended."""


@dataclass(frozen=True)
class SyncResult:
    sweep: str
    trials: int
    points: int  # spooled points sent now
    created: int  # runs created now
    complete: bool  # False: MLflow went away again before everything was written


def stores_of(config: SweepConfig, tracking_uri: str | None = None) -> tuple[str, str, str]:
    """``(tracking URI, experiment, workdir)`` a stored sweep used (``tracking_uri`` wins)."""
    workdir = config.workdir
    uri = tracking_uri or config.tracking.uri or local_tracking(workdir)
    return uri, config.tracking.experiment or config.name, workdir


def _child(record: TrialRecord, config: SweepConfig, parent: str) -> ChildRun:
    """A trial's run as the controller would have described it, from storage and spec.json."""
    spec: dict[str, Any] = {}
    if record.trial_dir and (Path(record.trial_dir) / SPEC_FILE).is_file():
        spec = json.loads((Path(record.trial_dir) / SPEC_FILE).read_text())
    space = set(config.dims)
    sampled = {k: v for k, v in record.params.items() if k in space}
    knobs = {k: v for k, v in sampled.items() if k.startswith("trial.")}
    population = config.is_population
    return ChildRun(
        sweep=config.name,
        parent_id=parent,
        number=record.number,
        params=spec.get("params") or {k: v for k, v in record.params.items() if k not in knobs},
        sampled=sampled,
        knobs=knobs,
        config=spec.get("trial") or {},
        prior_run_id=record.mlflow_run_id,
        population=population,
    )


def unknown_sweep(name: str, known: list[str], where: str) -> str:
    """``--sweep: no sweep named 'wram' in URL; did you mean 'warm'?`` (the hint only where a
    known name is close)."""
    hint = did_you_mean(name, known)
    return f"--sweep: no sweep named {name!r} in {where}" + (f"; {hint}" if hint else "")


def sync_sweep(storage: Storage, name: str, tracking_uri: str | None = None) -> SyncResult:
    """Bring MLflow up to date with sweep ``name`` (see the module docstring)."""
    row = storage.sweeps.get(name)
    if row is None:
        known = [r.name for r in storage.sweeps.all()]
        raise ConfigError(unknown_sweep(name, known, masked(storage.url)))
    cfg = row.parsed()
    uri, experiment, workdir = stores_of(cfg, tracking_uri)
    tracker = SweepTracker(uri, experiment, workdir, log_model=cfg.tracking.log_model, live=False)
    tracker.sweep, tracker.config = name, cfg
    parent = row.mlflow_parent_run_id
    if parent is None:
        parent = tracker.start_parent(name, None, cfg)
        storage.sweeps.update(
            name, mlflow_parent_run_id=parent, mlflow_experiment_id=tracker.experiment_id
        )
    tracker.parent_id = parent
    records = storage.trials.of(name)
    metrics = [m for m, _ in objectives(cfg)]
    for r in records:
        tracker.adopt(_child(r, cfg, parent))
        if r.state in ENDED:
            values = {m: float(r.metrics[m]) for m in metrics if m in r.metrics}
            final = values if r.state == TrialState.COMPLETE else {}
            # a pending id resolves (found or created) inside the write, in order
            tracker.end_child(
                r.mlflow_run_id or f"pending:{r.number}",
                r.state,
                final,
                r.error or "",
                ended_at=r.ended_at,
            )
        else:
            tracker.ship(r.number, r.mlflow_run_id)
    ended = {SweepStatus.DONE: "FINISHED", SweepStatus.INTERRUPTED: "SCHEDULED"}
    if row.status is SweepStatus.STOPPED and not any(r.state not in ENDED for r in records):
        ended[SweepStatus.STOPPED] = "KILLED"  # a user stopped it, and its trials all ended
    if row.status in ended:
        stopped = row.status is SweepStatus.STOPPED
        view = SweepView(name, cfg, records, row.status == SweepStatus.INTERRUPTED, stopped)
        complete = tracker.end_parent(parent, ended[row.status], view)
    else:
        complete = tracker.wait()
        tracker.outbox.close()
    created = tracker.resolved()
    for r in records:
        if is_pending(r.mlflow_run_id) and r.number in created:
            storage.trials.upsert(name, r.number, mlflow_run_id=created[r.number])
    fresh = sum(1 for r in records if is_pending(r.mlflow_run_id) and r.number in created)
    return SyncResult(name, len(records), tracker.shipped, fresh, complete)
