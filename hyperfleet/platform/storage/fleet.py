"""The fleet's records: workers, the devices each launch held, and trials that span hosts.

* A **worker** (``hyperfleet worker``, or the one ``sweep run`` starts) registers a row in
  ``hf_workers`` and heartbeats it; trials and leases name the worker that holds them. A
  worker whose heartbeat is older than ``stale_after`` is gone: its RUNNING trials are stale
  and any live worker requeues them.
* A **lease** row per launch: which worker held which devices of which host, from when to when
  (the device timeline, utilisation).
* A **gang** per launch of a trial with ``resources.nodes > 1``: the leader (node 0) opens it
  with the rendezvous endpoint and the spec; workers join as the other nodes until it is full;
  an unfilled gang is given up by its leader at its deadline.

:class:`FleetStore` is mixed into ``Storage`` (:mod:`.store`), which provides the session, the
clock and the trials' read; this module does not import it.
"""

from __future__ import annotations

import os
import socket
from dataclasses import fields
from typing import TYPE_CHECKING, Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from hyperfleet.platform.storage.records import GangRecord, LeaseRecord, TrialRecord, WorkerRecord
from hyperfleet.platform.storage.retry import retried
from hyperfleet.platform.storage.schema import GangRow, LeaseRow, TrialRow, WorkerRow
from hyperfleet.spec.states import GangState, TrialState, WorkerState


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class FleetStore:
    """Workers, leases and gangs (see the module docstring); needs the ``Storage`` basics."""

    retry_s: float
    _present: dict[str, frozenset[str]] | None = None  # each table's columns, looked up once

    if TYPE_CHECKING:  # provided by Storage

        def session(self) -> Any:
            raise NotImplementedError

        def now(self) -> float:
            raise NotImplementedError

        def trials(self, sweep: str, state: TrialState | None = None) -> list[TrialRecord]:
            raise NotImplementedError

    # -- workers --------------------------------------------------------------------------

    @retried
    def register_worker(self, record: WorkerRecord) -> None:
        with self.session() as s:
            s.merge(WorkerRow(**{f.name: getattr(record, f.name) for f in fields(WorkerRecord)}))

    @retried
    def heartbeat_worker(self, worker: str, state: WorkerState | None = None) -> bool:
        """Stamp the worker's heartbeat (and state); False if its row is gone."""
        with self.session() as s:
            row = s.get(WorkerRow, worker)
            if row is None:
                return False
            row.heartbeat_at = self.now()
            if state is not None:
                row.state = state
            return True

    @retried
    def beat(self, worker: str, state: WorkerState = WorkerState.ACTIVE) -> set[tuple[str, int]]:
        """One heartbeat of a worker and of every trial it runs, in one transaction; the
        ``(sweep, trial)`` pairs still RUNNING under it (a trial requeued by another worker,
        which found this one silent, is missing: its copy here must stop). One statement on
        PostgreSQL (the worker's row updated in a ``WITH`` of the trials' update), two on
        SQLite: every worker beats every few seconds, so a fleet's load grows with its size,
        and each round trip counts (1,000 simulated workers' heartbeats were a third of their
        CPU on 2 cores)."""
        now = self.now()
        workers, trials = cast(sa.Table, WorkerRow.__table__), cast(sa.Table, TrialRow.__table__)
        me = sa.update(workers).where(workers.c.id == worker).values(heartbeat_at=now, state=state)
        theirs = (
            sa.update(trials)
            .where(trials.c.worker == worker, trials.c.state == TrialState.RUNNING)
            .values(heartbeat_at=now)
            .returning(trials.c.sweep, trials.c.number)
        )
        with self.session() as s:
            if s.get_bind().dialect.name == "postgresql":
                owned = s.execute(theirs.add_cte(me.cte("beat_worker")))
            else:
                s.execute(me)
                owned = s.execute(theirs)
            return {(str(name), int(number)) for name, number in owned}

    @retried
    def held_columns(self, s: Any, table: sa.Table) -> list[sa.Column[Any]]:
        """The columns of ``table`` the database has: a reader of a database an older
        hyperfleet wrote reads it as it is (a writer upgrades it, ``schema.upgrade``); none for a
        table it does not have yet (a version-1 database has no ``hf_workers``)."""
        if self._present is None:
            self._present = {}
        present = self._present.get(table.name)
        if present is None:
            inspector = sa.inspect(s.connection())
            found = inspector.get_columns(table.name) if inspector.has_table(table.name) else []
            present = frozenset(c["name"] for c in found)
            if present >= {c.name for c in table.c}:  # whole: nothing it lacks can come later
                self._present[table.name] = present
        return [c for c in table.c if c.name in present]

    def workers(self) -> list[WorkerRecord]:
        table = cast(sa.Table, WorkerRow.__table__)
        with self.session() as s:
            columns = self.held_columns(s, table)
            if not columns:
                return []
            q = sa.select(*columns).order_by(table.c.started_at)
            return [WorkerRecord.of_mapping(r) for r in s.execute(q).mappings()]

    def live_workers(self, stale_after: float) -> list[WorkerRecord]:
        """Workers that run and heartbeat (a batch job still pending is not one)."""
        now = self.now()
        return [
            w
            for w in self.workers()
            if w.state == WorkerState.ACTIVE and now - w.heartbeat_at <= stale_after
        ]

    @retried
    def count_live_workers(self, stale_after: float) -> int:
        """How many workers run and heartbeat (:meth:`live_workers`), counted by the database."""
        table = cast(sa.Table, WorkerRow.__table__)
        q = sa.select(sa.func.count()).where(
            table.c.state == WorkerState.ACTIVE,
            table.c.heartbeat_at >= self.now() - stale_after,
        )
        with self.session() as s:
            return int(s.scalar(q) or 0)

    @retried
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

    @retried
    def set_job(self, job_id: str, job_state: str, reason: str | None, ended: bool = False) -> None:
        """Stamp what the batch scheduler says of job ``job_id`` on every row that names it
        (the pool's row of a pending job, and the row of the worker that runs in it); the
        pending row ends (``stopped``) once the job ended or its worker registered."""
        with self.session() as s:
            rows = list(s.scalars(sa.select(WorkerRow).where(WorkerRow.job_id == job_id)))
            started = any(r.state != WorkerState.PENDING for r in rows)
            for row in rows:
                row.job_state, row.job_reason = job_state, reason
                if row.state == WorkerState.PENDING:
                    row.heartbeat_at = self.now()
                    if ended or started:
                        row.state = WorkerState.STOPPED

    # -- leases ---------------------------------------------------------------------------

    @retried
    def open_lease(
        self, sweep: str, trial: int, devices: list[str], worker: str | None = None,
        share: int = 0, per_device: int = 1,
    ) -> int:  # fmt: skip
        """Record that this process (host, pid) holds ``devices`` for ``trial`` from now on
        (``share``: its lane on a device shared ``per_device`` ways)."""
        with self.session() as s:
            return self.insert_lease(s, sweep, trial, devices, worker, share, per_device)

    def insert_lease(
        self, s: Session, sweep: str, trial: int, devices: list[str], worker: str | None,
        share: int, per_device: int,
    ) -> int:  # fmt: skip
        """:meth:`open_lease` within the caller's transaction ``s`` (a launch takes its attempt
        and its lease in one: :meth:`Storage.launch_attempt`); the lease row's id."""
        row = LeaseRow(
            sweep=sweep, trial=trial, host=socket.gethostname(), pid=os.getpid(),
            devices=list(devices), started_at=self.now(), worker=worker,
            share=share, per_device=per_device,
        )  # fmt: skip
        s.add(row)
        s.flush()
        return int(row.id)

    @retried
    def close_lease(self, lease_id: int, state: TrialState) -> None:
        with self.session() as s:
            row = s.get(LeaseRow, lease_id)
            if row is not None and row.ended_at is None:
                row.ended_at, row.state = self.now(), state

    @retried
    def close_open_leases(self, sweep: str, trial: int, state: TrialState) -> int:
        """End every open lease of a trial (its worker is gone); how many there were."""
        with self.session() as s:
            q = sa.select(LeaseRow).where(
                LeaseRow.sweep == sweep, LeaseRow.trial == trial, LeaseRow.ended_at.is_(None)
            )
            rows = list(s.scalars(q))
            for row in rows:
                row.ended_at, row.state = self.now(), state
            return len(rows)

    @retried
    def leases(self, sweep: str | None = None) -> list[LeaseRecord]:
        """Every lease (of ``sweep``), oldest first; read with the columns the database has,
        so a reader of a database an older hyperfleet wrote sees its leases as whole."""
        table = cast(sa.Table, LeaseRow.__table__)
        with self.session() as s:
            columns = self.held_columns(s, table)
            if not columns:  # a database from before hf_leases
                return []
            q = sa.select(*columns).order_by(table.c.id)
            if sweep is not None:
                q = q.where(table.c.sweep == sweep)
            return [LeaseRecord.of_mapping(r) for r in s.execute(q).mappings()]

    # -- stale trials ---------------------------------------------------------------------

    def stale_running(self, sweep: str, heartbeat_timeout_s: float) -> list[TrialRecord]:
        """RUNNING trials that are gone: their controller's pid is dead on this host, or the
        trial is silent, its heartbeat older than ``heartbeat_timeout_s``. The heartbeat is
        stamped by its worker and by the trial's own reports, so a trial whose worker went
        silent (paused, cut off) but which still reports is not taken over: a takeover waits
        until the trial itself is silent too."""
        host, now = socket.gethostname(), self.now()
        stale = []
        for t in self._stale_candidates(sweep, host, now - heartbeat_timeout_s):
            dead = t.host == host and t.pid is not None and not pid_alive(t.pid)
            silent = t.heartbeat_at is None or now - t.heartbeat_at > heartbeat_timeout_s
            if dead or silent:
                stale.append(t)
        return stale

    @retried
    def _stale_candidates(self, sweep: str, host: str, silent_since: float) -> list[TrialRecord]:
        """The sweep's RUNNING trials that are silent since ``silent_since`` or run by a dead
        process of ``host``, read by the database: a worker asks every few seconds, so it
        reads what may be stale, not every running trial of the fleet. The other processes
        of ``host`` are read first (their pids, a few rows) and only a dead one's trials
        after: several workers on one host each read every trial of the others otherwise
        (1,000 workers on one host: most of their CPU)."""
        beat, me = TrialRow.heartbeat_at, os.getpid()
        running = sa.and_(TrialRow.sweep == sweep, TrialRow.state == TrialState.RUNNING)
        with self.session() as s:
            pids = s.scalars(
                sa.select(TrialRow.pid).distinct()
                .where(running, TrialRow.host == host, TrialRow.pid != me)
            )  # fmt: skip
            dead = [int(p) for p in pids if p is not None and not pid_alive(int(p))]
            gone = [beat.is_(None), beat < silent_since]
            if dead:
                gone.append(sa.and_(TrialRow.host == host, TrialRow.pid.in_(dead)))
            q = sa.select(TrialRow).where(running, sa.or_(*gone)).order_by(TrialRow.number)
            return [TrialRecord.of(r) for r in s.scalars(q)]

    @retried
    def take_over(self, t: TrialRecord, retry: bool = True) -> bool:
        """Requeue the stale trial ``t`` (WAITING, one more retry unless ``retry`` is false: its
        controller stopped it and could not say so) if it is still as it was
        read: RUNNING at the same attempt with the same heartbeat. False when it beat or
        reported since (its worker or copy was only paused), or someone else took it."""
        beat = TrialRow.heartbeat_at
        query = (
            sa.update(TrialRow)
            .where(
                TrialRow.sweep == t.sweep, TrialRow.number == t.number,
                TrialRow.state == TrialState.RUNNING, TrialRow.attempts == t.attempts,
                beat.is_(None) if t.heartbeat_at is None else beat == t.heartbeat_at,
            )
            .values(state=TrialState.WAITING, retries=t.retries + int(retry))
        )  # fmt: skip
        with self.session() as s:
            return bool(s.execute(query).rowcount)

    # -- gangs ----------------------------------------------------------------------------

    @retried
    def open_gang(self, gang: GangRecord) -> int:
        with self.session() as s:
            values = {f.name: getattr(gang, f.name) for f in fields(GangRecord) if f.name != "id"}
            row = GangRow(**values)
            s.add(row)
            s.flush()
            return int(row.id)

    @retried
    def gangs(self, sweep: str, state: GangState | None = None) -> list[GangRecord]:
        with self.session() as s:
            q = sa.select(GangRow).where(GangRow.sweep == sweep).order_by(GangRow.id)
            if state is not None:
                q = q.where(GangRow.state == state)
            return [GangRecord.of(r) for r in s.scalars(q)]

    @retried
    def join_gang(self, gang_id: int, worker: str) -> int | None:
        """Add ``worker`` as the next node of an open gang; its node rank, or None when the
        gang is full, over, or already has this worker."""
        with self.session() as s:
            row = s.get(GangRow, gang_id, with_for_update=True)
            if row is None or row.state != GangState.OPEN or worker in row.members:
                return None
            if row.deadline < self.now():
                return None
            row.members = [*row.members, worker]
            if len(row.members) >= row.nodes:
                row.state = GangState.FULL
            return len(row.members) - 1

    @retried
    def set_gang_state(self, gang_id: int, state: GangState) -> None:
        with self.session() as s:
            row = s.get(GangRow, gang_id)
            if row is not None:
                row.state = state
