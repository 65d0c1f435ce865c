"""The platform's storage: Optuna's RDB study tables plus hyperfleet's own, in one database.

:class:`Storage` opens a database URL (SQLite or PostgreSQL) in one of three ways:

* ``Storage(url)`` — the controller: creates the schema if missing (:mod:`.schema`);
* ``Storage(url, create=False)`` — trial processes: the schema is there, no DDL is run;
* ``Storage.open_readonly(url)`` — readers (``sweep status``, ``sweep list``, the dashboard):
  nothing is created (a mistyped SQLite path is an error, not a new empty file) and nothing
  can be written.

Every write is one transaction.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from hyperfleet.errors import StorageError
from hyperfleet.platform.storage.engine import (
    configure_sqlite,
    create_engine,
    engine_kwargs,
    readonly_url,
)
from hyperfleet.platform.storage.schema import (
    LeaseRow,
    SweepRow,
    TrialRow,
    check_readable,
    create_schema,
    members_table,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrialRecord:
    """A read-only copy of a ``hf_trials`` row."""

    sweep: str
    number: int
    state: str
    params: Mapping[str, Any]
    host: str | None
    pid: int | None
    heartbeat_at: float | None
    started_at: float | None
    ended_at: float | None
    attempts: int
    last_step: int | None
    metrics: Mapping[str, Any]
    outcome: str | None
    error: str | None
    mlflow_run_id: str | None
    log_path: str | None
    trial_dir: str | None


@dataclass(frozen=True)
class LeaseRecord:
    """A read-only copy of a ``hf_leases`` row: devices held by one launch of a trial."""

    id: int
    sweep: str
    trial: int
    host: str
    pid: int
    devices: list[str]
    started_at: float
    ended_at: float | None
    state: str | None


def _record(row: TrialRow) -> TrialRecord:
    return TrialRecord(**{f: getattr(row, f) for f in TrialRecord.__dataclass_fields__})


def worker_identity() -> tuple[str, int]:
    return socket.gethostname(), os.getpid()


class Storage:
    """hyperfleet's tables and Optuna's RDB storage on one database URL."""

    def __init__(
        self, url: str, create: bool = True, readonly: bool = False, clock: Any = None
    ) -> None:
        """``create=False`` (trial processes): the controller already made the tables and
        checked Optuna's schema version, so opening costs no DDL or migration lookup.
        ``readonly``: see :meth:`open_readonly`. ``clock`` (``.time()``, default the system's)
        stamps heartbeats and reports: a simulated sweep runs on a virtual clock."""
        self.url = url
        self.clock = clock
        self.create = create and not readonly
        self.readonly = readonly
        self.engine = create_engine(url, readonly=readonly)
        try:
            if self.create:
                create_schema(self.engine)
            elif readonly:
                check_readable(self.engine)
        except sa.exc.OperationalError as exc:
            self.engine.dispose()
            raise StorageError(f"storage: cannot open {url!r}: {exc.orig}") from None
        except StorageError:
            self.engine.dispose()
            raise
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._optuna: Any = None

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
            import optuna

            url = readonly_url(self.url) if self.readonly else self.url
            self._optuna = optuna.storages.RDBStorage(
                url,
                engine_kwargs=engine_kwargs(self.url, self.readonly),
                skip_compatibility_check=not self.create,
                skip_table_creation=not self.create,
            )
            configure_sqlite(self._optuna.engine, self.readonly)
        return self._optuna

    def has_studies(self) -> bool:
        """True when Optuna's tables exist (a PBT-only database has none)."""
        return sa.inspect(self.engine).has_table("studies")

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._sessions.begin() as s:
            yield s

    def close(self) -> None:
        self.engine.dispose()
        if self._optuna is not None:
            self._optuna.remove_session()
            self._optuna.engine.dispose()

    # -- sweeps ------------------------------------------------------------------------

    def get_sweep(self, name: str) -> SweepRow | None:
        with self.session() as s:
            return s.get(SweepRow, name)

    def create_sweep(self, name: str, config: Mapping[str, Any]) -> SweepRow:
        now = self.now()
        row = SweepRow(
            name=name, study_name=name, config=dict(config), created_at=now, updated_at=now
        )
        with self.session() as s:
            s.add(row)
        return row

    def update_sweep(self, name: str, **fields: Any) -> None:
        with self.session() as s:
            row = s.get(SweepRow, name, with_for_update=True)
            assert row is not None, f"sweep {name} vanished"
            for key, value in fields.items():
                setattr(row, key, value)
            row.updated_at = self.now()

    def list_sweeps(self) -> list[SweepRow]:
        with self.session() as s:
            return list(s.scalars(sa.select(SweepRow).order_by(SweepRow.created_at)))

    # -- trials ------------------------------------------------------------------------

    def get_trial(self, sweep: str, number: int) -> TrialRecord | None:
        with self.session() as s:
            row = self._trial_row(s, sweep, number)
            return _record(row) if row else None

    def trials(self, sweep: str) -> list[TrialRecord]:
        with self.session() as s:
            q = sa.select(TrialRow).where(TrialRow.sweep == sweep).order_by(TrialRow.number)
            return [_record(r) for r in s.scalars(q)]

    @staticmethod
    def _trial_row(s: Session, sweep: str, number: int, lock: bool = False) -> TrialRow | None:
        q = sa.select(TrialRow).where(TrialRow.sweep == sweep, TrialRow.number == number)
        if lock:
            q = q.with_for_update()
        return s.scalars(q).one_or_none()

    def upsert_trial(self, sweep: str, number: int, **fields: Any) -> TrialRecord:
        with self.session() as s:
            row = self._trial_row(s, sweep, number, lock=True)
            if row is None:
                row = TrialRow(sweep=sweep, number=number, state="WAITING", attempts=0)
                row.params, row.metrics = {}, {}
                s.add(row)
            for key, value in fields.items():
                setattr(row, key, value)
            s.flush()
            return _record(row)

    def now(self) -> float:
        return time.time() if self.clock is None else float(self.clock.time())

    def record_report(
        self, sweep: str, number: int, step: int, metrics: Mapping[str, float]
    ) -> None:
        self.upsert_trial(
            sweep, number, last_step=step, metrics=dict(metrics), heartbeat_at=self.now()
        )

    # -- leases ------------------------------------------------------------------------

    def open_lease(self, sweep: str, trial: int, devices: list[str]) -> int:
        """Record that this process (host, pid) holds ``devices`` for ``trial`` from now on."""
        host, pid = worker_identity()
        with self.session() as s:
            row = LeaseRow(
                sweep=sweep, trial=trial, host=host, pid=pid, devices=list(devices),
                started_at=self.now(),
            )  # fmt: skip
            s.add(row)
            s.flush()
            return int(row.id)

    def close_lease(self, lease_id: int, state: str) -> None:
        with self.session() as s:
            row = s.get(LeaseRow, lease_id)
            if row is not None and row.ended_at is None:
                row.ended_at, row.state = self.now(), state

    def leases(self, sweep: str) -> list[LeaseRecord]:
        with self.session() as s:
            q = sa.select(LeaseRow).where(LeaseRow.sweep == sweep).order_by(LeaseRow.id)
            return [
                LeaseRecord(**{f: getattr(r, f) for f in LeaseRecord.__dataclass_fields__})
                for r in s.scalars(q)
            ]

    def stale_running(self, sweep: str, heartbeat_timeout_s: float = 120.0) -> list[TrialRecord]:
        """RUNNING trials whose worker is gone: a dead pid on this host, or a silent heartbeat."""
        host, _ = worker_identity()
        now = self.now()
        stale = []
        for t in self.trials(sweep):
            if t.state != "RUNNING":
                continue
            dead = t.host == host and t.pid is not None and not _pid_alive(t.pid)
            silent = t.heartbeat_at is None or now - t.heartbeat_at > heartbeat_timeout_s
            if dead or silent:
                stale.append(t)
        return stale

    # -- readers -----------------------------------------------------------------------

    def pbt_members(self, sweep: str) -> list[dict[str, Any]]:
        """The ``hf_pbt_members`` rows of ``sweep`` as plain dicts, ordered by member.

        A plain read for readers such as the dashboard: unlike the population store's
        ``members`` (which takes the sweep's write lock to read consistently with a
        decision), it works on a read-only storage and never waits for a running sweep.
        """
        t = members_table
        query = sa.select(t).where(t.c.sweep == sweep).order_by(t.c.member)
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(query).mappings()]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
