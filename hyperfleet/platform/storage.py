"""The platform's storage: Optuna's RDB study tables plus hyperfleet's own, in one database.

Optuna keeps the search history (trials, params, intermediate and final values). hyperfleet
adds what a platform must survive a crash with: the sweep's configuration and its MLflow ids,
and per trial its worker, heartbeat, last report, log and checkpoint locations and the tail of
its error. Every write is one transaction. SQLite is opened in WAL mode with a long busy
timeout so the running sweep, its trial processes and readers (``sweep status``, the dashboard)
don't lock each other out; a ``postgresql://`` URL works the same way for many hosts.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from hyperfleet.errors import StorageError

logger = logging.getLogger(__name__)

SQLITE_TIMEOUT_S = 60


class Base(DeclarativeBase):
    """Declarative base of every hyperfleet table (prefix ``hf_``)."""


class SweepRow(Base):
    __tablename__ = "hf_sweeps"
    name: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    study_name: Mapped[str] = mapped_column(sa.String(256))
    config: Mapped[dict[str, Any]] = mapped_column(sa.JSON)
    created_at: Mapped[float] = mapped_column(sa.Float)
    updated_at: Mapped[float] = mapped_column(sa.Float)
    status: Mapped[str] = mapped_column(sa.String(32), default="created")
    mlflow_experiment_id: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    mlflow_parent_run_id: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)


class TrialRow(Base):
    __tablename__ = "hf_trials"
    __table_args__ = (sa.UniqueConstraint("sweep", "number"),)
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    sweep: Mapped[str] = mapped_column(sa.ForeignKey("hf_sweeps.name"), index=True)
    number: Mapped[int] = mapped_column(sa.Integer)
    state: Mapped[str] = mapped_column(sa.String(16))
    params: Mapped[dict[str, Any]] = mapped_column(sa.JSON, default=dict)
    host: Mapped[str | None] = mapped_column(sa.String(255), nullable=True)
    pid: Mapped[int | None] = mapped_column(sa.Integer, nullable=True)
    heartbeat_at: Mapped[float | None] = mapped_column(sa.Float, nullable=True)
    started_at: Mapped[float | None] = mapped_column(sa.Float, nullable=True)
    ended_at: Mapped[float | None] = mapped_column(sa.Float, nullable=True)
    attempts: Mapped[int] = mapped_column(sa.Integer, default=0)
    last_step: Mapped[int | None] = mapped_column(sa.Integer, nullable=True)
    metrics: Mapped[dict[str, Any]] = mapped_column(sa.JSON, default=dict)
    outcome: Mapped[str | None] = mapped_column(sa.String(16), nullable=True)
    error: Mapped[str | None] = mapped_column(sa.Text, nullable=True)
    mlflow_run_id: Mapped[str | None] = mapped_column(sa.String(64), nullable=True)
    log_path: Mapped[str | None] = mapped_column(sa.Text, nullable=True)
    trial_dir: Mapped[str | None] = mapped_column(sa.Text, nullable=True)


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


def _record(row: TrialRow) -> TrialRecord:
    return TrialRecord(**{f: getattr(row, f) for f in TrialRecord.__dataclass_fields__})


def _prepare_sqlite(url: str) -> None:
    path = make_url(url).database
    if path and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)


def _on_sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute(f"PRAGMA busy_timeout={SQLITE_TIMEOUT_S * 1000}")
    cur.close()


def create_engine(url: str) -> Engine:
    """A SQLAlchemy engine for ``url``; SQLite in WAL mode with a long busy timeout."""
    try:
        backend = make_url(url).get_backend_name()
    except sa.exc.ArgumentError as exc:
        raise StorageError(f"storage: not a database URL: {url!r} ({exc})") from None
    if backend == "sqlite":
        _prepare_sqlite(url)
        engine = sa.create_engine(url, connect_args={"timeout": SQLITE_TIMEOUT_S})
        event.listen(engine, "connect", _on_sqlite_connect)
        return engine
    return sa.create_engine(url, pool_pre_ping=True)


def worker_identity() -> tuple[str, int]:
    return socket.gethostname(), os.getpid()


class Storage:
    """hyperfleet's tables and Optuna's RDB storage on one database URL."""

    def __init__(self, url: str, create: bool = True) -> None:
        """``create=False`` (trial processes): the controller already made the tables and
        checked Optuna's schema version, so opening costs no DDL or migration lookup."""
        self.url = url
        self.create = create
        self.engine = create_engine(url)
        try:
            if create:
                Base.metadata.create_all(self.engine)
        except sa.exc.OperationalError as exc:
            raise StorageError(f"storage: cannot open {url!r}: {exc.orig}") from None
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._optuna: Any = None

    @property
    def optuna(self) -> Any:
        """Optuna's ``RDBStorage`` on the same database (created on first use)."""
        if self._optuna is None:
            import optuna

            kwargs: dict[str, Any] = {}
            if self.engine.dialect.name == "sqlite":
                kwargs = {"connect_args": {"timeout": SQLITE_TIMEOUT_S}}
            else:
                kwargs = {"pool_pre_ping": True}
            self._optuna = optuna.storages.RDBStorage(
                self.url,
                engine_kwargs=kwargs,
                skip_compatibility_check=not self.create,
                skip_table_creation=not self.create,
            )
        return self._optuna

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
        now = time.time()
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
            row.updated_at = time.time()

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

    def record_report(
        self, sweep: str, number: int, step: int, metrics: Mapping[str, float]
    ) -> None:
        self.upsert_trial(
            sweep, number, last_step=step, metrics=dict(metrics), heartbeat_at=time.time()
        )

    def stale_running(self, sweep: str, heartbeat_timeout_s: float = 120.0) -> list[TrialRecord]:
        """RUNNING trials whose worker is gone: a dead pid on this host, or a silent heartbeat."""
        host, _ = worker_identity()
        now = time.time()
        stale = []
        for t in self.trials(sweep):
            if t.state != "RUNNING":
                continue
            dead = t.host == host and t.pid is not None and not _pid_alive(t.pid)
            silent = t.heartbeat_at is None or now - t.heartbeat_at > heartbeat_timeout_s
            if dead or silent:
                stale.append(t)
        return stale


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
