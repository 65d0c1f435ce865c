"""A stored sweep met again from Python: continued, refused, resumed with new code, or replaced.

``hyperfleet.run(cfg, f)`` (and ``submit``) of a name the storage holds continues that sweep.
When the function's code differs from the stored one (``trial.code_hash``, see
:mod:`~hyperfleet.platform.sweeps.shipping`; a notebook cell edited and run again), running on
would return the stored sweep's result, or mix trials of two codes, without a word: so the run
is refused (:func:`check_stored`) with the three ways on, before anything is written:

* a new name: a new sweep beside the stored one;
* ``resume=True``: continue the stored sweep, its later trials running the new code (its
  finished trials stay as they are);
* ``overwrite=True``: drop the stored sweep and start over under the same name
  (:func:`drop_sweep`).

A changed search space is refused the same way (a continued sweep keeps its space), with a new
name or ``overwrite=True`` as the ways on.

**Dropping a sweep** removes what a new sweep of the name would otherwise meet: its MLflow runs
(the parent and every trial's, deleted as MLflow deletes runs: ``mlflow gc`` purges them), its
run directory (trial directories, checkpoints, logs, its ownership marker), a directory replica
of its checkpoints, Optuna's study and every ``hf_*`` row of it. It is refused while a trial of
the sweep runs with a live heartbeat (another process serves it). An object store replica's
objects are left (the new sweep's replica folder is named after its own creation time).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from hyperfleet.errors import ConfigError, HyperfleetError
from hyperfleet.platform.clock import STALE_AFTER_S
from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.credentials import masked
from hyperfleet.platform.storage import Storage, SweepRecord, TrialRecord
from hyperfleet.platform.storage.ownership import (
    check_same_code,
    code_id,
    same_workload,
    stored_sweep,
)
from hyperfleet.platform.storage.paths import sweep_replica
from hyperfleet.platform.storage.schema import (
    GangRow,
    LeaseRow,
    SweepRow,
    TrialRow,
    ahead_table,
    lineage_table,
    members_table,
    populations_table,
)
from hyperfleet.spec.states import TrialState
from hyperfleet.spec.trial import replica_is_remote

logger = logging.getLogger(__name__)

__all__ = ["check_stored", "drop_sweep"]


def check_stored(cfg: SweepConfig, storage_url: str, overwrite: bool, resume: bool) -> bool:
    """Whether the stored sweep of ``cfg.name`` is to be dropped before this run (``overwrite``
    and one is stored); ``ConfigError`` with the ways on when its workload's code or its space
    differs and neither ``resume`` nor ``overwrite`` was given (see the module docstring).
    Reads only."""
    if overwrite and resume:
        raise ConfigError(
            "overwrite, resume: give one of them (overwrite=True starts the sweep over, "
            "resume=True continues it with this code)"
        )
    row = stored_sweep(storage_url, cfg.name)
    if row is None or overwrite:
        return row is not None
    name = cfg.name
    if row.stored_config.get("space") != cfg.model_dump(mode="json")["space"]:
        raise ConfigError(
            f"space: differs from the stored sweep {name!r}, and a continued sweep keeps its "
            f"space; give a new name, or overwrite=True to drop the stored sweep and start over"
        )
    stored = dict(row.stored_config.get("trial") or {})
    given = cfg.trial.model_dump(mode="json")
    if resume or same_workload(stored, given):
        return False
    check_same_code(cfg, row, storage_url)  # another process runs it now: that, said first
    raise ConfigError(
        f"workload: the stored sweep {name!r} ran {code_id(stored)}, this run gives "
        f"{code_id(given)}; give a new name, overwrite=True (drop the stored sweep and start "
        f"over) or resume=True (continue it with this code)"
    )


def drop_sweep(storage_url: str, row: SweepRecord) -> None:
    """Remove sweep ``row.name`` and what it made (see the module docstring); ``ConfigError``
    while a trial of it runs elsewhere, or when its MLflow runs cannot be deleted (then
    nothing is removed)."""
    storage = Storage(storage_url, create=False)
    try:
        with storage.claim_lock(row.name):
            records = storage.trials(row.name)
            _refuse_running(storage, row.name, records)
            _delete_runs(row, records)
            _remove_files(row)
            _delete_study(storage, row.study_name)
            _delete_rows(storage, row.name)
    finally:
        storage.close()
    logger.info("sweep %s dropped from %s", row.name, masked(storage_url))


def _refuse_running(storage: Storage, name: str, records: Iterable[TrialRecord]) -> None:
    now = storage.now()
    live = [
        r for r in records
        if r.state == TrialState.RUNNING and r.heartbeat_at and now - r.heartbeat_at < STALE_AFTER_S
    ]  # fmt: skip
    if live:
        where = ", ".join(sorted({f"{r.host} pid {r.pid}" for r in live}))
        raise ConfigError(
            f"overwrite: sweep {name!r} has {len(live)} trial(s) running ({where}); stop them "
            f"or let the sweep end before overwriting it, or give a new name"
        )


def _run_ids(client: Any, row: SweepRecord, records: Iterable[TrialRecord]) -> list[str]:
    """The sweep's MLflow runs: its parent, the runs its trials recorded, and every child of
    the parent MLflow holds (one created after its trial's row was last written)."""
    from hyperfleet.platform.tracking.spool import is_pending

    ids = [r.mlflow_run_id for r in records if not is_pending(r.mlflow_run_id)]
    parent = row.mlflow_parent_run_id
    if parent and row.mlflow_experiment_id:
        children = client.search_runs(
            [row.mlflow_experiment_id], f"tags.mlflow.parentRunId = '{parent}'", max_results=50_000
        )
        ids += [run.info.run_id for run in children]
    return list(dict.fromkeys([*([parent] if parent else []), *(i for i in ids if i)]))


def _delete_runs(row: SweepRecord, records: list[TrialRecord]) -> None:
    """Delete the sweep's MLflow runs (nothing for a sweep that has none, or whose local
    store is gone)."""
    config = row.config
    uri = None if config is None else config.tracking.uri
    if uri is None or row.mlflow_parent_run_id is None:
        return
    from hyperfleet.platform.storage.ownership import absolute_uri
    from hyperfleet.platform.tracking.client import is_server, open_client, sqlite_path

    path = None if is_server(uri) else sqlite_path(absolute_uri(uri))
    if path is not None and not path.exists():
        return
    try:
        client = open_client(uri)
        for run_id in _run_ids(client, row, records):
            try:
                client.delete_run(run_id)
            except Exception as exc:
                if getattr(exc, "error_code", None) != "RESOURCE_DOES_NOT_EXIST":
                    raise  # a run already purged is skipped
    except HyperfleetError:
        raise
    except Exception as exc:  # noqa: BLE001 - MLflow's errors: one line, nothing removed yet
        reason = " ".join(str(exc).split())[:200]
        raise ConfigError(
            f"overwrite: cannot delete sweep {row.name!r}'s MLflow runs at {masked(uri)} "
            f"({reason}); make its tracking store reachable, or give a new name"
        ) from None


def _remove_files(row: SweepRecord) -> None:
    """The sweep's run directory and a directory replica of its checkpoints."""
    stored = row.stored_config
    workdir = stored.get("workdir")
    if workdir:
        shutil.rmtree(Path(str(workdir)) / row.name, ignore_errors=True)
    replica = ((stored.get("trial") or {}).get("checkpoint") or {}).get("replica")
    if replica and not replica_is_remote(replica):
        shutil.rmtree(sweep_replica(replica, row.name, row.created_at), ignore_errors=True)


def _delete_study(storage: Storage, study_name: str) -> None:
    """Optuna's study of the sweep (none for a PBT-only database)."""
    if not storage.has_studies():
        return
    import optuna

    with contextlib.suppress(KeyError):
        optuna.delete_study(study_name=study_name, storage=storage.optuna)


def _delete_rows(storage: Storage, name: str) -> None:
    """Every ``hf_*`` row of the sweep, in one transaction (its trials before the sweep)."""
    with storage.session() as s:
        for model in (TrialRow, LeaseRow, GangRow):
            s.execute(sa.delete(model).where(model.sweep == name))
        for table in (ahead_table, members_table, lineage_table, populations_table):
            s.execute(sa.delete(table).where(table.c.sweep == name))
        s.execute(sa.delete(SweepRow).where(SweepRow.name == name))
