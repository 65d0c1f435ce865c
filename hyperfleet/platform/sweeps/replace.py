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

**Dropping a sweep** is ``sweep delete NAME --yes`` (:mod:`~hyperfleet.platform.sweeps.delete`):
its MLflow runs (deleted as MLflow deletes runs: ``mlflow gc`` purges them), its run directory
(trial directories, checkpoints, logs, its ownership marker), a directory replica of its
checkpoints, Optuna's study and every ``hf_*`` row of it. It is refused while the sweep is
served (its trials running with live heartbeats in another process). An object store replica's
objects are left (the new sweep's replica folder is named after its own creation time).
"""

from __future__ import annotations

import logging

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.storage import SweepRecord
from hyperfleet.platform.storage.ownership import (
    check_same_code,
    code_id,
    same_workload,
    stored_sweep,
)
from hyperfleet.platform.sweeps.delete import delete_sweep, plan_deletion

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
    """Remove sweep ``row.name`` and what it made, as ``sweep delete NAME --yes`` does
    (:mod:`~hyperfleet.platform.sweeps.delete`); ``ConfigError`` while it is served (nothing
    is removed then)."""
    deleted = delete_sweep(plan_deletion(storage_url, row.name))
    logger.info("overwrite: %s", deleted.line())
