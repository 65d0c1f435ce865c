"""``hyperfleet sweep submit`` and ``hyperfleet sweep run``.

``submit_sweep`` creates a sweep (or updates the budget of a stored one) in its storage, with
its study and its MLflow parent run, for workers to take, and returns. ``SweepRunner`` is the
one-command, one-host case: it submits, then runs a local worker restricted to that sweep
(:func:`~hyperfleet.platform.worker.run_worker`, the same loop ``hyperfleet worker`` runs)
until the sweep is done. Two ``sweep run`` of one file on two hosts therefore cooperate on
one sweep instead of duplicating it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hyperfleet.errors import StorageError
from hyperfleet.platform.clock import STALE_AFTER_S
from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.controller import Progress, Timing, Until
from hyperfleet.platform.elastic.resize import ElasticKnobs
from hyperfleet.platform.launcher.launchers import Launchers, build_pool
from hyperfleet.platform.schedulers import check_scheduler
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.engine import sqlite_path
from hyperfleet.platform.storage.objects import probe_replica
from hyperfleet.platform.storage.ownership import (
    check_owner,
    check_same_code,
    check_same_space,
    check_same_store,
    owned_config,
    stored_sweep,
)
from hyperfleet.platform.storage.results import SweepSummary, summarize
from hyperfleet.platform.sweeps.lifecycle import check_runnable
from hyperfleet.platform.sweeps.preflight import check_destinations, writable_dir
from hyperfleet.platform.sweeps.replace import drop_sweep
from hyperfleet.platform.worker import check_pool, open_stored, run_worker
from hyperfleet.spec.states import FINISHED, SweepStatus

__all__ = ["Progress", "SweepRunner", "build_pool", "default_urls", "submit_sweep"]


def default_urls(cfg: SweepConfig) -> tuple[str, str]:
    """The sweep's storage URL and tracking URI, the defaults in its workdir if it names none."""
    return cfg.storage_url, cfg.tracking_uri


def preflight(
    cfg: SweepConfig,
    storage_url: str,
    tracking_uri: str,
    runs: bool = False,
    replace: bool = False,
) -> SweepConfig:
    """The checks made before anything is written: the sweep's scheduler can be built from
    its configuration (:func:`~hyperfleet.platform.schedulers.check_scheduler`, as
    ``hyperfleet validate`` builds it); the working directory, the storage and the tracking
    server can be used; (``runs``: it is run here) an object store replica takes a write
    (:mod:`~hyperfleet.platform.storage.objects`); the sweep's run directory is not another
    sweep's, a continued sweep keeps its space and its tracking store, and (``runs``) another
    process does not run it with other code (:mod:`~hyperfleet.platform.storage.ownership`).
    ``replace``: a stored sweep of the name is dropped once the checks that do not depend on
    it have passed (:func:`~hyperfleet.platform.sweeps.replace.drop_sweep`). Returns ``cfg``
    as it is stored: workdir and tracking URI absolute (they belong to the sweep)."""
    check_scheduler(cfg)  # what its sampler would refuse once the sweep is stored
    check_destinations(storage_url, tracking_uri)  # servers first: a refusal leaves no folder
    writable_dir(cfg.workdir, "workdir")
    if runs:
        probe_replica(cfg.trial.checkpoint)
    cfg = owned_config(cfg, tracking_uri)
    row = stored_sweep(storage_url, cfg.name)
    if replace and row is not None:
        drop_sweep(storage_url, row)
        row = None
    check_runnable(row)  # not a sweep a user paused or stopped
    check_owner(cfg, row)
    check_same_space(cfg, row)
    check_same_store(cfg, row)
    if runs:
        check_same_code(cfg, row, storage_url)
    return cfg


def submit_sweep(
    cfg: SweepConfig,
    storage_url: str,
    tracking_uri: str,
    stale_after: float = STALE_AFTER_S,
    sweep_file: str | Path | None = None,
    replace: bool = False,
) -> SweepSummary:
    """Create the sweep (or update a stored one's budget) for workers to take; its summary.
    ``sweep_file`` goes onto a new sweep's MLflow run; ``replace``: a stored sweep of the name
    is dropped first.

    Checked first, before anything is written (:func:`preflight`); and that some live worker
    could hold one node of its trials."""
    cfg = preflight(cfg, storage_url, tracking_uri, replace=replace)
    return _submit(cfg, storage_url, stale_after, sweep_file)


def _submit(
    cfg: SweepConfig, storage_url: str, stale_after: float, sweep_file: str | Path | None
) -> SweepSummary:
    assert cfg.tracking.uri is not None  # set by preflight
    registry = Storage(storage_url, retry_s=cfg.storage_retry)
    try:
        check_pool(cfg, registry, stale_after)
        session = open_stored(cfg, storage_url, cfg.tracking.uri, sweep_file=sweep_file)
        session.storage.sweeps.update(cfg.name, config=cfg.model_dump(mode="json"))
        summary = summarize(session.storage, cfg.name)
        if not summary.trials:
            session.storage.sweeps.update(cfg.name, status=SweepStatus.SUBMITTED)
        session.tracker.close()  # the sweep file is on the sweep's run before workers start
        session.storage.close()
        return summary
    finally:
        registry.close()


class SweepRunner:
    """One sweep on this host: submit it, then serve it with a local worker until it is done.
    Constructing it checks the devices, the working directory, the storage, the tracking
    URI and the run directory's owner, before anything is written."""

    def __init__(
        self,
        cfg: SweepConfig,
        storage_url: str,
        tracking_uri: str,
        devices: str = "auto",
        on_progress: Callable[[Progress], None] | None = None,
        timing: Timing | None = None,
        sweep_file: str | Path | None = None,
        launchers: Launchers | None = None,
        replace: bool = False,
    ) -> None:
        """``launchers``: ones already starting the first trials' processes
        (:func:`~hyperfleet.platform.launcher.launchers.prestarted`), whose pool is the
        sweep's; ``replace``: a stored sweep of the name is dropped (after the checks)."""
        self.cfg = cfg
        self.sweep_file = sweep_file  # logged on the sweep's MLflow run
        self.storage_url = storage_url
        self.tracking_uri = tracking_uri
        self.launchers = launchers
        self.pool = build_pool(cfg, devices) if launchers is None else launchers.pool
        self.cfg = preflight(cfg, storage_url, tracking_uri, runs=True, replace=replace)
        self.on_progress = on_progress
        self.timing = timing

    def run(self) -> SweepSummary:
        # the first trials' processes start (an interpreter, torch) while the sweep is opened;
        # a sweep that has run its budget (the same command again) starts none
        launchers = self.launchers
        if launchers is None:
            launchers = Launchers(self.pool)
            if not ran_its_budget(self.cfg, self.storage_url):
                launchers.prestart(self.cfg)
        try:
            _submit(self.cfg, self.storage_url, STALE_AFTER_S, self.sweep_file)
        except BaseException:
            launchers.close()
            raise
        summaries, signalled = run_worker(
            self.storage_url, self.pool, sweeps=[self.cfg.name], tracking_uri=self.cfg.tracking.uri,
            until=Until(done=True), timing=self.timing, on_progress=self.on_progress,
            launchers=launchers, retry_s=self.cfg.storage_retry,
            elastic=ElasticKnobs.of(self.cfg.elastic),  # the file's: its pool serves this sweep
        )  # fmt: skip
        if self.cfg.name in summaries:
            return summaries[self.cfg.name]
        storage = Storage.open_readonly(self.storage_url)
        try:  # stopped before it served the sweep, or others still run its trials
            return summarize(storage, self.cfg.name, interrupted=signalled)
        finally:
            storage.close()


def ran_its_budget(cfg: SweepConfig, storage_url: str) -> bool:
    """Whether the stored sweep is done with every trial of its budget ended (none waiting):
    running it again launches no trial. Asked of a SQLite file only (a server's outage is
    for the sweep's own opening to report); False when unsure (no store yet, a population,
    no trial budget, a larger budget than it ran, a store that does not open)."""
    path = sqlite_path(storage_url)
    if cfg.is_population or cfg.budget.trials is None or path is None or not path.is_file():
        return False
    try:
        storage = Storage.open_readonly(storage_url)
    except StorageError:
        return False
    try:
        row = storage.sweeps.get(cfg.name)
        if row is None or row.status != SweepStatus.DONE:
            return False
        trials = storage.trials.of(cfg.name)
    finally:
        storage.close()
    return all(t.state in FINISHED for t in trials) and len(trials) >= cfg.budget.trials
