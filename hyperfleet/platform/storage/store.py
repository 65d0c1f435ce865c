"""The platform's storage: Optuna's RDB study tables plus hyperfleet's own, in one database.

:class:`Storage` opens a database URL (SQLite or PostgreSQL) in one of three ways:

* ``Storage(url)`` — the controller: creates the schema if missing (:mod:`.schema`);
* ``Storage(url, create=False)`` — trial processes: the schema is there, no DDL is run;
* ``Storage.open_readonly(url)`` — readers (``sweep status``, ``sweep list``, the dashboard):
  nothing is created (a mistyped SQLite path is an error, not a new empty file) and nothing
  can be written.

Every write is one transaction.

The sweeps' and trials' records, with the trials' fencing of attempts, are parts
(``storage.sweeps``, :mod:`.sweeps`; ``storage.trials``, :mod:`.trials`), like the rest.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from hyperfleet.errors import StorageError
from hyperfleet.platform.credentials import keep, reveal
from hyperfleet.platform.storage.ahead import AheadStore
from hyperfleet.platform.storage.engine import (
    connection_problem,
    release_engine,
    release_optuna,
    shared_engine,
    shared_optuna,
    too_few_connections,
)
from hyperfleet.platform.storage.gangs import GangStore
from hyperfleet.platform.storage.leases import LeaseStore
from hyperfleet.platform.storage.lifecycle import SweepLifecycle
from hyperfleet.platform.storage.locks import claim_lock, try_claim_lock
from hyperfleet.platform.storage.population import SqlPopulationStore
from hyperfleet.platform.storage.removal import SweepRemoval
from hyperfleet.platform.storage.retry import DEFAULT_RETRY_S, login_refused, refused_message
from hyperfleet.platform.storage.retry import retried as _retried
from hyperfleet.platform.storage.schema import check_readable, create_schema
from hyperfleet.platform.storage.stale import StaleTrials
from hyperfleet.platform.storage.sweeps import SweepStore
from hyperfleet.platform.storage.trials import TrialStore
from hyperfleet.platform.storage.workers import WorkerStore
from hyperfleet.platform.urls import masked

logger = logging.getLogger(__name__)


def worker_identity() -> tuple[str, int]:
    return socket.gethostname(), os.getpid()


class Storage:
    """hyperfleet's tables and Optuna's RDB storage on one database URL: the connection, its
    transactions, clock and claim locks here, the tables' reads and writes in parts
    (:mod:`.part`), each over this storage's engine: ``sweeps`` (:mod:`.sweeps`), ``trials``
    (:mod:`.trials`), ``workers`` (:mod:`.workers`), ``leases`` (:mod:`.leases`), ``gangs``
    (:mod:`.gangs`), ``ahead`` (suggestions made ahead, :mod:`.ahead`), ``stale`` (trials whose
    copy is gone, :mod:`.stale`), ``removal`` (a deleted sweep's rows, :mod:`.removal`),
    ``lifecycle`` (a sweep's status as users and workers change it, :mod:`.lifecycle`) and
    ``population`` (PBT's, :mod:`.population`)."""

    def __init__(
        self,
        url: str,
        create: bool = True,
        readonly: bool = False,
        clock: Any = None,
        retry_s: float = DEFAULT_RETRY_S,
        lane: str = "work",
    ) -> None:
        """``create=False`` (trial processes): the controller already made the tables and
        checked Optuna's schema version, so opening costs no DDL or migration lookup.
        ``readonly``: see :meth:`open_readonly`. ``clock`` (``.time()``, default the system's)
        stamps heartbeats and reports: a simulated sweep runs on a virtual clock. ``retry_s``:
        how long a data method rides out an outage (:mod:`.retry`). ``lane``: the process's
        pool it uses, ``"heartbeat"`` for a worker's heartbeat (:mod:`.engine`)."""
        self.url = keep(url)  # without its password: what is shown and handed on
        self.retry_s = retry_s
        self.clock = clock
        self.create = create and not readonly
        self.readonly = readonly
        self.engine = shared_engine(reveal(self.url), readonly=readonly, lane=lane)
        try:
            if self.create:
                create_schema(self.engine)
                problem = connection_problem(self.engine)
                if problem is not None:
                    raise StorageError(problem)
            elif readonly:
                check_readable(self.engine)
        except sa.exc.OperationalError as exc:
            release_engine(self.engine)
            reason = login_refused(exc)
            if reason is not None:
                raise StorageError(refused_message(reason, url)) from None
            if "too many connections" in str(exc.orig):
                limit = str(exc.orig).rpartition("FATAL:")[2].strip()
                raise StorageError(too_few_connections(f"the server ({limit})")) from None
            raise StorageError(f"storage: cannot open {masked(url)!r}: {exc.orig}") from None
        except StorageError:
            release_engine(self.engine)
            raise
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._optuna: Any = None
        self._closed = False
        self._present: dict[str, frozenset[str]] = {}  # each table's columns, looked up once
        self.workers = WorkerStore(self)
        self.sweeps = SweepStore(self)
        self.leases = LeaseStore(self)
        self.trials = TrialStore(self, self.leases)
        self.gangs = GangStore(self)
        self.ahead = AheadStore(self)
        self.stale = StaleTrials(self)
        self.removal = SweepRemoval(self)  # a sweep's rows and study deleted (:mod:`.removal`)
        self.lifecycle = SweepLifecycle(self)
        self.population = SqlPopulationStore(self.engine)

    @classmethod
    def open_readonly(cls, url: str) -> Storage:
        """Open for reading only: creates nothing, runs no DDL, writes nothing.

        ``StorageError`` (one line) when the database does not exist, is unreachable, or
        holds no hyperfleet sweeps.
        """
        return cls(url, create=False, readonly=True)

    @property
    def optuna(self) -> Any:
        """Optuna's ``RDBStorage`` on the same database (created on first use)."""
        if self._optuna is None:
            self._optuna = shared_optuna(self.url, self.readonly, self.create)
        return self._optuna

    def claim_lock(self, sweep: str) -> AbstractContextManager[None]:
        """The sweep's claim lock (:mod:`.locks`): held while asking its scheduler for a trial
        and recording it, and while opening or recovering the sweep."""
        return claim_lock(self.engine, self.url, sweep)

    def try_claim_lock(self, sweep: str) -> AbstractContextManager[bool]:
        """The sweep's claim lock if it is free now (True in the block), else False at once."""
        return try_claim_lock(self.engine, self.url, sweep)

    def has_studies(self) -> bool:
        """True when Optuna's tables exist (a PBT-only database has none)."""
        return sa.inspect(self.engine).has_table("studies")

    @_retried
    def held_columns(self, s: Any, table: sa.Table) -> list[sa.Column[Any]]:
        """The columns of ``table`` the database has: a reader of a database an older
        hyperfleet wrote reads it as it is (a writer upgrades it, ``schema.upgrade``); none for a
        table it does not have yet (a version-1 database has no ``hf_workers``)."""
        present = self._present.get(table.name)
        if present is None:
            inspector = sa.inspect(s.connection())
            found = inspector.get_columns(table.name) if inspector.has_table(table.name) else []
            present = frozenset(c["name"] for c in found)
            if present >= {c.name for c in table.c}:  # whole: nothing it lacks can come later
                self._present[table.name] = present
        return [c for c in table.c if c.name in present]

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._sessions.begin() as s:
            yield s

    def close(self) -> None:
        """Give back the engine and Optuna's storage (closed when no other ``Storage`` of
        the process uses them; a closed storage still works, on connections of its own)."""
        if self._closed:
            return
        self._closed = True
        release_engine(self.engine)
        if self._optuna is not None:
            self._optuna.remove_session()
            release_optuna(self._optuna)
            self._optuna = None

    def now(self) -> float:
        return time.time() if self.clock is None else float(self.clock.time())
