"""A worker: one host's devices serving the sweeps of a shared storage.

``hyperfleet worker --storage URL`` registers itself (``hf_workers``: host, pool, devices,
advertised address, heartbeat), then runs the controller loop over every active sweep of the
storage (or those named with ``--sweep``), in order of ``budget.priority`` then age, until it
is stopped: SIGTERM or SIGINT drain it (running trials are stopped, checkpointed and requeued,
not failed; devices released; the worker deregistered). It holds no state that is not in the
database, so a worker killed with SIGKILL and restarted (or replaced by another anywhere)
loses only the work since each trial's last checkpoint: once its heartbeat is older than
``--stale-after``, any live worker requeues its trials.

Workers are started by whatever the team runs — a shell on each host, ``docker compose
--scale worker=N``, a Slurm array, a Kubernetes Job — and coordinate only through the
database (PostgreSQL for many hosts), the way Optuna distributes a study.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config import SweepConfig, parse_sweep
from hyperfleet.platform.controller import Controller, SweepSession, Timing, Until, open_session
from hyperfleet.platform.elastic.resize import ElasticKnobs
from hyperfleet.platform.launcher.launchers import Launchers
from hyperfleet.platform.pool import LocalPool
from hyperfleet.platform.storage import Storage, WorkerRecord
from hyperfleet.platform.storage.locks import file_lock_for
from hyperfleet.platform.storage.objects import probe_replica
from hyperfleet.platform.storage.ownership import check_store
from hyperfleet.platform.storage.results import SweepSummary
from hyperfleet.platform.storage.retry import DEFAULT_RETRY_S
from hyperfleet.platform.tracking import SweepTracker, TrackingUnavailableError
from hyperfleet.spec.states import SWEEP_SERVED, WorkerState

logger = logging.getLogger(__name__)

#: seconds before a worker probes again a sweep's object store replica that refused its probe
PROBE_AGAIN_S = 60.0


def default_tracking(cfg: SweepConfig) -> str:
    return cfg.tracking_uri


def open_stored(
    cfg: SweepConfig,
    storage_url: str,
    tracking_uri: str,
    sweep_file: str | Path | None = None,
) -> SweepSession:
    """Open (create or continue) ``cfg``'s sweep with its own storage connection and tracker
    (``sweep_file``: logged on the sweep's run when this creates it)."""
    storage = Storage(storage_url, retry_s=cfg.storage_retry)
    row = storage.sweeps.get(cfg.name)
    try:  # a continued sweep whose local MLflow store this host does not see: not a new one
        check_store(cfg.name, tracking_uri, row.mlflow_parent_run_id if row else None)
    except ConfigError:
        storage.close()
        raise
    experiment = cfg.tracking.experiment or cfg.name
    with file_lock_for(tracking_uri, "mlflow-create"):  # two new sweeps, one new store
        tracker = SweepTracker(
            tracking_uri, experiment, cfg.workdir, sweep_file=sweep_file,
            register_model=cfg.tracking.register_model, log_model=cfg.tracking.log_model,
        )  # fmt: skip
    return open_session(cfg, storage, tracker, tracking_uri)


class StoredSweeps:
    """The active sweeps of a storage that this worker serves: all, or the ``names`` given;
    only those of its ``pool`` (a sweep without ``resources.pool`` goes to any pool), and only
    trials whose nodes fit its devices."""

    def __init__(
        self,
        storage_url: str,
        names: list[str] | None,
        pool: str,
        devices: int,
        tracking_uri: str | None = None,
    ) -> None:
        self.storage_url = storage_url
        self.names = names
        self.pool = pool
        self.devices = devices
        self.tracking_uri = tracking_uri
        self._skipped: set[str] = set()
        self._refused: dict[str, str] = {}  # sweep -> why it cannot be opened here
        self._unusable: set[str] = set()  # sweeps whose config has a problem on this host
        self._probed: set[str] = set()  # sweeps whose replica took this host's probe
        self._probe_failed: dict[str, tuple[float, str]] = {}  # sweep -> (when, why)
        self.catalog = Storage(storage_url, create=False)

    def _fits(self, cfg: SweepConfig) -> bool:
        r = cfg.trial.resources
        if r.pool is not None and r.pool != self.pool:
            return False
        per_node = r.devices // r.nodes
        if per_node > self.devices:
            if cfg.name not in self._skipped:
                logger.warning(
                    "sweep %s needs %d devices per node; this worker has %d: not serving it",
                    cfg.name, per_node, self.devices,
                )  # fmt: skip
                self._skipped.add(cfg.name)
            return False
        return True

    def sessions(self, serving: set[str]) -> list[SweepSession]:
        opened = []
        for row in self.catalog.sweeps.all():
            if row.name in serving or row.status not in SWEEP_SERVED:
                continue
            if self.names is not None and row.name not in self.names:
                continue
            cfg = self._parse(row.name, row.stored_config)
            if cfg is not None and self._fits(cfg):
                session = self._open(cfg)
                if session is not None:
                    opened.append(session)
        return opened

    def _parse(self, name: str, stored: Mapping[str, Any]) -> SweepConfig | None:
        """The sweep's config as this host reads it; None, said once in one line and
        remembered, when it has a problem here (a relative ``trial.command`` script that is
        only in its submitter's directory): that sweep's problem on this host, never the
        worker's, which goes on serving the others."""
        if name in self._unusable:
            return None
        try:
            return parse_sweep(stored)
        except ConfigError as exc:
            logger.warning("not serving sweep %s on this host: %s", name, exc)
            self._unusable.add(name)
            return None

    def _open(self, cfg: SweepConfig) -> SweepSession | None:
        """The sweep opened with its own tracking store (this worker's ``--tracking-uri``,
        else the default, only for a sweep stored without one); None, said once in one line,
        when it cannot be (its store or its run directory is not this host's to use, or its
        object store replica refused this host's probe)."""
        uri = cfg.tracking.uri or self.tracking_uri or default_tracking(cfg)
        try:
            self._probe(cfg)
            session = open_stored(cfg, self.storage_url, uri)
        except (ConfigError, TrackingUnavailableError) as exc:
            if self._refused.get(cfg.name) != str(exc):
                logger.warning("not serving sweep %s: %s", cfg.name, exc)
                self._refused[cfg.name] = str(exc)
            return None
        self._refused.pop(cfg.name, None)
        return session

    def _probe(self, cfg: SweepConfig) -> None:
        """The sweep's object store replica takes a write from this host
        (:func:`~hyperfleet.platform.storage.objects.probe_replica`), before this worker's
        first trial of it: once per sweep when it does, again after ``PROBE_AGAIN_S`` when it
        did not (the last refusal is raised meanwhile, without asking the store)."""
        if cfg.trial.checkpoint.replica is None or cfg.name in self._probed:
            return
        failed = self._probe_failed.get(cfg.name)
        if failed is not None and time.monotonic() - failed[0] < PROBE_AGAIN_S:
            raise ConfigError(failed[1])
        try:
            probe_replica(cfg.trial.checkpoint)
        except ConfigError as exc:
            self._probe_failed[cfg.name] = (time.monotonic(), str(exc))
            raise
        self._probe_failed.pop(cfg.name, None)
        self._probed.add(cfg.name)


def worker_record(
    pool: LocalPool, pool_name: str, address: str | None, sweeps: list[str] | None, now: float
) -> WorkerRecord:
    host = socket.gethostname()
    return WorkerRecord(
        id=f"{host}-{os.getpid()}-{uuid.uuid4().hex[:6]}",
        host=host,
        pid=os.getpid(),
        pool=pool_name,
        devices=[str(d) for d in pool.devices],
        address=address,
        sweeps=sweeps,
        started_at=now,
        heartbeat_at=now,
        state=WorkerState.ACTIVE,
        job_id=os.environ.get("SLURM_JOB_ID"),  # a worker a Slurm job runs: the pool's row
    )


@contextmanager
def draining_on_signals(stop: Callable[[], None]) -> Iterator[threading.Event]:
    """SIGINT and SIGTERM call ``stop`` (a drain) while the block runs; the event is set when
    one arrived."""
    got = threading.Event()

    def handler(*_: Any) -> None:
        got.set()
        stop()

    if threading.current_thread() is not threading.main_thread():
        yield got
        return
    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield got
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def run_worker(
    storage_url: str,
    pool: LocalPool,
    *,
    sweeps: list[str] | None = None,
    pool_name: str = "default",
    address: str | None = None,
    tracking_uri: str | None = None,
    until: Until | None = None,
    timing: Timing | None = None,
    on_progress: Any = None,
    launchers: Launchers | None = None,
    retry_s: float = DEFAULT_RETRY_S,
    counts_only: bool = False,
    elastic: ElasticKnobs | None = None,
) -> tuple[dict[str, SweepSummary], bool]:
    """Serve the storage's sweeps on ``pool`` until stopped or ``until``; the summaries of the
    sweeps closed meanwhile and whether a signal stopped it. ``launchers``: ones already
    holding started processes (``sweep run`` starts its first trials' at once). ``retry_s``:
    how long the worker's own storage waits out an outage until it serves a sweep (then the
    sweeps' ``storage_retry``). ``counts_only``: the summary of a sweep that others ran to its
    end holds its counts only (one of a fleet's workers: each reading every trial of a sweep
    as it ends is the fleet's size times the sweep's table). ``elastic``: the resize policy's
    knobs over ``pool`` (every sweep it serves)."""
    launchers = launchers or Launchers(pool)
    registry = Storage(storage_url, retry_s=retry_s)  # creates the schema of a new database
    record = worker_record(pool, pool_name, address, sweeps, time.time())
    source = StoredSweeps(storage_url, sweeps, pool_name, pool.size, tracking_uri)
    source.catalog.retry_s = retry_s
    controller = Controller(
        pool, source, launchers, timing=timing, worker=record, registry=registry,
        until=until or Until(done=False), on_progress=on_progress, counts_only=counts_only,
        elastic=elastic,
    )  # fmt: skip
    logger.info(
        "worker %s serves %s on %s; resizes elastic trials by %s",
        record.id, sweeps or "every sweep", record.devices, controller.resizer.knobs,
    )  # fmt: skip
    with draining_on_signals(controller.request_stop) as signalled:
        summaries = controller.run()
    registry.close()
    return summaries, signalled.is_set()


def unschedulable(cfg: SweepConfig, registry: Storage, stale_after: float) -> str | None:
    """Why no live worker could hold one node of the sweep's trials, or None if one can (or
    none is registered yet: workers may still come)."""
    r = cfg.trial.resources
    if r.devices == 0:
        return None
    pool = r.pool or "default"
    live = [w for w in registry.workers.live(stale_after) if r.pool is None or w.pool == pool]
    if not live:
        return None
    largest = max(live, key=lambda w: len(w.devices))
    per_node = r.devices // r.nodes
    if per_node <= len(largest.devices):
        return None
    where = f" in pool {pool}" if r.pool else ""
    return (
        f"trial.resources.devices: a trial needs {per_node} devices per node, but the largest "
        f"live worker{where} ({largest.host}) has {len(largest.devices)}; lower it, raise "
        f"resources.nodes, or start a worker with more devices"
    )


def check_pool(cfg: SweepConfig, registry: Storage, stale_after: float) -> None:
    """``ConfigError`` at submit when live workers of the sweep's pool exist and none could
    ever hold one node of its trials."""
    reason = unschedulable(cfg, registry, stale_after)
    if reason is not None:
        raise ConfigError(reason)
