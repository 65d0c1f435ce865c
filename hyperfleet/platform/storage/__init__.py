"""The platform's storage: one database (SQLite or PostgreSQL) for Optuna's study tables and
every ``hf_*`` table of the platform (:mod:`.schema`), opened by :class:`Storage`, which hands
back typed records (:mod:`.records`) with the states of
:mod:`hyperfleet.spec.states`. :class:`Storage` holds the connection; the tables' reads and
writes are in its parts, one module each (:mod:`.part`): ``storage.sweeps``,
``storage.trials``, ``storage.workers``, ``storage.leases``, ``storage.gangs``,
``storage.ahead``, ``storage.stale``, ``storage.removal``, ``storage.lifecycle`` and
``storage.population``."""

from hyperfleet.platform.storage.engine import SQLITE_TIMEOUT_S, create_engine, sqlite_path
from hyperfleet.platform.storage.records import (
    GangRecord,
    LeaseRecord,
    SweepFields,
    SweepRecord,
    TrialFields,
    TrialRecord,
    WorkerRecord,
)
from hyperfleet.platform.storage.schema import SCHEMA_VERSION, SweepRow, TrialRow, create_schema
from hyperfleet.platform.storage.store import Storage, worker_identity

__all__ = [
    "SCHEMA_VERSION",
    "SQLITE_TIMEOUT_S",
    "GangRecord",
    "LeaseRecord",
    "Storage",
    "SweepFields",
    "SweepRecord",
    "SweepRow",
    "TrialFields",
    "TrialRecord",
    "TrialRow",
    "WorkerRecord",
    "create_engine",
    "create_schema",
    "sqlite_path",
    "worker_identity",
]
