"""The platform's storage: Optuna's RDB study tables plus hyperfleet's own, in one database.

:class:`Storage` opens a database URL (SQLite or PostgreSQL) in one of three ways:

* ``Storage(url)`` — the controller: creates the schema if missing (:mod:`.schema`);
* ``Storage(url, create=False)`` — trial processes: the schema is there, no DDL is run;
* ``Storage.open_readonly(url)`` — readers (``sweep status``, ``sweep list``, the dashboard):
  nothing is created (a mistyped SQLite path is an error, not a new empty file) and nothing
  can be written.

Every write is one transaction.

**Fencing.** Every launch of a trial takes the next attempt number (:meth:`Storage.start_attempt`,
``hf_trials.attempts``), which its spec carries. Writes made by the trial's copy pass it
(``attempt=`` / ``fence=``): storage applies them only while the trial is RUNNING at that
attempt, in the same statement or transaction, and raises :class:`~hyperfleet.errors.Superseded`
otherwise, so a copy that was taken over (its worker or host paused, then continued) never
changes the record of the copy that replaced it. A worker's launch takes its attempt and its
lease in one transaction (:meth:`Storage.launch_attempt`), only while the trial is still that
worker's claim: one that stalled after its claim until the trial was requeued and taken by
another worker starts no second copy.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Unpack, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from hyperfleet.errors import StorageError, Superseded
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
from hyperfleet.platform.storage.records import (
    SweepFields,
    SweepRecord,
    TrialFields,
    TrialRecord,
    json_safe,
)
from hyperfleet.platform.storage.removal import SweepRemoval
from hyperfleet.platform.storage.retry import DEFAULT_RETRY_S, login_refused, refused_message
from hyperfleet.platform.storage.retry import retried as _retried
from hyperfleet.platform.storage.schema import SweepRow, TrialRow, check_readable, create_schema
from hyperfleet.platform.storage.stale import StaleTrials
from hyperfleet.platform.storage.trial_rows import check_fence, set_fields, trial_row
from hyperfleet.platform.storage.workers import WorkerStore
from hyperfleet.platform.urls import masked
from hyperfleet.spec.states import SweepStatus, TrialState

logger = logging.getLogger(__name__)


def worker_identity() -> tuple[str, int]:
    return socket.gethostname(), os.getpid()


class Storage:
    """hyperfleet's tables and Optuna's RDB storage on one database URL: the sweeps' and
    trials' records here, the rest in parts (:mod:`.part`), each over this storage's engine:
    ``workers`` (:mod:`.workers`), ``leases`` (:mod:`.leases`), ``gangs`` (:mod:`.gangs`),
    ``ahead`` (suggestions made ahead, :mod:`.ahead`), ``stale`` (trials whose copy is gone,
    :mod:`.stale`), ``removal`` (:mod:`.removal`), ``lifecycle`` (a sweep's status as users and
    workers change it, :mod:`.lifecycle`) and ``population`` (PBT's, :mod:`.population`)."""

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
        self.leases = LeaseStore(self)
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

    @_retried
    def state_counts(self, sweep: str) -> dict[str, int]:
        """The sweep's trials counted by state, by the database (a fleet's workers leaving a
        sweep as it ends: each would otherwise read every trial)."""
        q = (
            sa.select(TrialRow.state, sa.func.count())
            .where(TrialRow.sweep == sweep)
            .group_by(TrialRow.state)
        )
        with self.session() as s:
            return {str(state): int(n) for state, n in s.execute(q)}

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

    # -- sweeps ------------------------------------------------------------------------

    @_retried
    def get_sweep(self, name: str) -> SweepRecord | None:
        with self.session() as s:
            row = s.get(SweepRow, name)
            return None if row is None else SweepRecord.of(row)

    @_retried
    def create_sweep(self, name: str, config: Mapping[str, Any]) -> SweepRecord:
        """Create the sweep's row, or return it if another process created it first."""
        now = self.now()
        row = SweepRow(
            name=name, study_name=name, config=dict(config), created_at=now, updated_at=now,
            status=SweepStatus.CREATED,
        )  # fmt: skip
        try:
            with self.session() as s:
                s.add(row)
        except sa.exc.IntegrityError:
            existing = self.get_sweep(name)
            assert existing is not None
            return existing
        return SweepRecord.of(row)

    @_retried
    def update_sweep(self, name: str, **fields: Unpack[SweepFields]) -> None:
        """Set ``fields`` of the sweep's row, under its row lock; a row that already holds
        them is left as it is, without the lock. Every worker of a fleet writes the same
        status when it opens a sweep and when it closes it: at 1,000 simulated workers
        closing a sweep together, up to 345 sessions queued on its row, each holder keeping
        the lock over three round trips of a busy client."""
        unknown = set(fields) - set(SweepFields.__annotations__)
        if unknown:
            raise TypeError(f"not a field of a sweep's row: {', '.join(sorted(unknown))}")
        with self.session() as s:
            row = s.get(SweepRow, name)
            assert row is not None, f"sweep {name} vanished"
            if all(getattr(row, key) == value for key, value in fields.items()):
                return  # as last committed: a later write of other values wins, as after ours
            row = s.get(SweepRow, name, with_for_update=True, populate_existing=True)
            assert row is not None, f"sweep {name} vanished"
            for key, value in fields.items():
                setattr(row, key, value)
            row.updated_at = self.now()

    @_retried
    def list_sweeps(self) -> list[SweepRecord]:
        with self.session() as s:
            q = sa.select(SweepRow).order_by(SweepRow.created_at)
            return [SweepRecord.of(r) for r in s.scalars(q)]

    # -- trials ------------------------------------------------------------------------

    @_retried
    def get_trial(self, sweep: str, number: int) -> TrialRecord | None:
        table = cast(sa.Table, TrialRow.__table__)
        with self.session() as s:
            columns = self.held_columns(s, table)
            if not columns:  # no hf_trials yet: a database its sweep has not written to
                return None
            where = sa.select(*columns).where(table.c.sweep == sweep, table.c.number == number)
            row = s.execute(where).mappings().first()
            return TrialRecord.of_mapping(row) if row else None

    @_retried
    def trials(self, sweep: str, state: TrialState | None = None) -> list[TrialRecord]:
        """The sweep's trials by number (``state``: only those in it, read by the database)."""
        table = cast(sa.Table, TrialRow.__table__)
        with self.session() as s:
            # the columns the database has: a reader of an older schema reads it as it is
            columns = self.held_columns(s, table)
            if not columns:  # no hf_trials yet: a database its sweep has not written to
                return []
            q = sa.select(*columns).where(table.c.sweep == sweep)
            if state is not None:
                q = q.where(table.c.state == state)
            rows = s.execute(q.order_by("number")).mappings()
            return [TrialRecord.of_mapping(r) for r in rows]

    @_retried
    def running_elsewhere(self, sweep: str, worker: str | None) -> int:
        """How many trials of ``sweep`` are RUNNING under another worker than ``worker``."""
        q = sa.select(sa.func.count()).where(
            TrialRow.sweep == sweep, TrialRow.state == TrialState.RUNNING
        )
        if worker is not None:
            q = q.where(sa.or_(TrialRow.worker.is_(None), TrialRow.worker != worker))
        with self.session() as s:
            return int(s.scalar(q) or 0)

    @_retried
    def upsert_trial(
        self, sweep: str, number: int, fence: int | None = None, **fields: Unpack[TrialFields]
    ) -> TrialRecord:
        """Set ``fields`` of the trial's row (created if missing). ``fence``: the writer's
        attempt; refused (:class:`Superseded`) unless the trial is RUNNING at it."""
        with self.session() as s:
            row = trial_row(s, sweep, number, lock=True)
            if fence is not None:
                check_fence(row, number, fence)
            row = set_fields(s, row, sweep, number, fields)
            s.flush()
            return TrialRecord.of(row)

    @_retried
    def start_attempt(self, sweep: str, number: int, **fields: Unpack[TrialFields]) -> int:
        """A launch of the trial: its next attempt number, taken under the row's lock with
        ``fields`` (RUNNING, this worker, ...); writes of earlier attempts are refused from
        now on."""
        with self.session() as s:
            row = trial_row(s, sweep, number, lock=True)
            return self._next_attempt(s, row, sweep, number, fields)

    @_retried
    def launch_attempt(
        self, sweep: str, number: int, devices: list[str], share: int = 0, per_device: int = 1,
        **fields: Unpack[TrialFields],
    ) -> tuple[int, int]:  # fmt: skip
        """The launch of a trial this worker claimed (``fields["worker"]``): its next attempt
        number (:meth:`start_attempt`) and its lease of ``devices`` (:meth:`.LeaseStore.open`), in
        one transaction under the row's lock, and only while the trial is still RUNNING under
        this worker. :class:`Superseded` when it is not: the worker stalled between its claim
        and its launch (its heartbeats late on a machine out of CPU) until another worker
        took it for lost and requeued it, maybe launched it already; a launch then would be
        a second live copy (it took the record over and opened a second lease)."""
        worker = fields.get("worker")
        with self.session() as s:
            row = trial_row(s, sweep, number, lock=True)
            if row is None or row.state != TrialState.RUNNING or row.worker != worker:
                held = "gone" if row is None else f"{row.state} under {row.worker or 'no worker'}"
                raise Superseded(
                    f"trial {number} was requeued since its claim here (now {held})",
                    None if row is None else int(row.attempts or 0),
                )
            attempt = self._next_attempt(s, row, sweep, number, fields)
            return attempt, self.leases.insert(s, sweep, number, devices, worker, share, per_device)

    def _next_attempt(
        self, s: Session, row: TrialRow | None, sweep: str, number: int, fields: TrialFields
    ) -> int:
        row = set_fields(s, row, sweep, number, fields)
        row.attempts = int(row.attempts or 0) + 1
        s.flush()
        return int(row.attempts)

    @_retried
    def check_attempt(self, sweep: str, number: int, attempt: int) -> None:
        """Raise :class:`Superseded` unless the trial is RUNNING at ``attempt``: a copy asks
        before it writes a file another copy may own (its checkpoint)."""
        with self.session() as s:
            check_fence(trial_row(s, sweep, number), number, attempt)

    def now(self) -> float:
        return time.time() if self.clock is None else float(self.clock.time())

    @_retried
    def record_report(
        self,
        sweep: str,
        number: int,
        step: int,
        metrics: Mapping[str, float],
        attempt: int | None = None,
    ) -> None:
        """One report of a running trial: its last step and metrics, and a heartbeat (the
        trial's own: it keeps the trial live while its worker is paused). On the hot path of
        every ``ctx.report``, so one UPDATE statement in one transaction (no read, no ORM); a
        trial without a row yet gets one through :meth:`upsert_trial`. ``attempt``: fenced
        in the same statement (:class:`Superseded` when it matched no row)."""
        fields = TrialFields(
            last_step=step, metrics=json_safe(dict(metrics)), heartbeat_at=self.now()
        )
        where = [TrialRow.sweep == sweep, TrialRow.number == number]
        if attempt is not None:
            where += [TrialRow.attempts == attempt, TrialRow.state == TrialState.RUNNING]
        query = sa.update(TrialRow).where(*where).values(**fields)
        with self.engine.begin() as conn:
            updated = conn.execute(query).rowcount
        if updated:
            return
        if attempt is not None:
            self.check_attempt(sweep, number, attempt)  # raises: the UPDATE matched nothing
        self.upsert_trial(sweep, number, fence=attempt, **fields)
