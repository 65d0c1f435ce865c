"""The trials' records (``storage.trials``): one row of ``hf_trials`` per trial of a sweep,
its state, worker, last report and attempts.

**Fencing.** Every launch of a trial takes the next attempt number
(:meth:`TrialStore.start_attempt`, ``hf_trials.attempts``), which its spec carries. Writes
made by the trial's copy pass it (``attempt=`` / ``fence=``): storage applies them only while
the trial is RUNNING at that attempt, in the same statement or transaction, and raises
:class:`~hyperfleet.errors.Superseded` otherwise, so a copy that was taken over (its worker or
host paused, then continued) never changes the record of the copy that replaced it. A
worker's launch takes its attempt and its lease in one transaction
(:meth:`TrialStore.launch_attempt`), only while the trial is still that worker's claim: one
that stalled after its claim until the trial was requeued and taken by another worker starts
no second copy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Unpack, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from hyperfleet.errors import Superseded
from hyperfleet.platform.storage.leases import LeaseStore
from hyperfleet.platform.storage.part import Basics, Part
from hyperfleet.platform.storage.records import TrialFields, TrialRecord, json_safe
from hyperfleet.platform.storage.retry import retried
from hyperfleet.platform.storage.schema import TrialRow
from hyperfleet.platform.storage.trial_rows import check_fence, set_fields, trial_row
from hyperfleet.spec.states import TrialState


class TrialStore(Part):
    """``hf_trials``: read, count and write the trials, and fence their attempts."""

    def __init__(self, storage: Basics, leases: LeaseStore) -> None:
        super().__init__(storage)
        self.leases = leases  # a launch opens its lease in its attempt's transaction

    @retried
    def get(self, sweep: str, number: int) -> TrialRecord | None:
        table = cast(sa.Table, TrialRow.__table__)
        with self.session() as s:
            columns = self.storage.held_columns(s, table)
            if not columns:  # no hf_trials yet: a database its sweep has not written to
                return None
            where = sa.select(*columns).where(table.c.sweep == sweep, table.c.number == number)
            row = s.execute(where).mappings().first()
            return TrialRecord.of_mapping(row) if row else None

    @retried
    def of(self, sweep: str, state: TrialState | None = None) -> list[TrialRecord]:
        """The sweep's trials by number (``state``: only those in it, read by the database)."""
        table = cast(sa.Table, TrialRow.__table__)
        with self.session() as s:
            # the columns the database has: a reader of an older schema reads it as it is
            columns = self.storage.held_columns(s, table)
            if not columns:  # no hf_trials yet: a database its sweep has not written to
                return []
            q = sa.select(*columns).where(table.c.sweep == sweep)
            if state is not None:
                q = q.where(table.c.state == state)
            rows = s.execute(q.order_by("number")).mappings()
            return [TrialRecord.of_mapping(r) for r in rows]

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
    def running_elsewhere(self, sweep: str, worker: str | None) -> int:
        """How many trials of ``sweep`` are RUNNING under another worker than ``worker``."""
        q = sa.select(sa.func.count()).where(
            TrialRow.sweep == sweep, TrialRow.state == TrialState.RUNNING
        )
        if worker is not None:
            q = q.where(sa.or_(TrialRow.worker.is_(None), TrialRow.worker != worker))
        with self.session() as s:
            return int(s.scalar(q) or 0)

    @retried
    def upsert(
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

    @retried
    def start_attempt(self, sweep: str, number: int, **fields: Unpack[TrialFields]) -> int:
        """A launch of the trial: its next attempt number, taken under the row's lock with
        ``fields`` (RUNNING, this worker, ...); writes of earlier attempts are refused from
        now on."""
        with self.session() as s:
            row = trial_row(s, sweep, number, lock=True)
            return _next_attempt(s, row, sweep, number, fields)

    @retried
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
            attempt = _next_attempt(s, row, sweep, number, fields)
            return attempt, self.leases.insert(s, sweep, number, devices, worker, share, per_device)

    @retried
    def check_attempt(self, sweep: str, number: int, attempt: int) -> None:
        """Raise :class:`Superseded` unless the trial is RUNNING at ``attempt``: a copy asks
        before it writes a file another copy may own (its checkpoint)."""
        with self.session() as s:
            check_fence(trial_row(s, sweep, number), number, attempt)

    @retried
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
        trial without a row yet gets one through :meth:`upsert`. ``attempt``: fenced in the
        same statement (:class:`Superseded` when it matched no row)."""
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
        self.upsert(sweep, number, fence=attempt, **fields)

    @retried
    def record_size(
        self, sweep: str, number: int, step: int, ranks: int, attempt: int | None = None
    ) -> None:
        """The trial reports from ``step`` on at ``ranks`` ranks: called at the first report
        of each launch (a launch runs at one size). Pairs from ``step`` on are dropped first
        (a trial that starts over, or rewinds to a donor's earlier step, reports them again);
        a size equal to the one before adds nothing. Fenced as :meth:`record_report`."""
        with self.session() as s:
            row = trial_row(s, sweep, number, lock=True)
            if attempt is not None:
                check_fence(row, number, attempt)
            if row is None:
                return
            held = [pair for pair in row.sizes or [] if pair[0] < step]
            if not held or held[-1][1] != ranks:
                held.append([step, ranks])
            if held != row.sizes:
                row.sizes = held


def _next_attempt(
    s: Session, row: TrialRow | None, sweep: str, number: int, fields: TrialFields
) -> int:
    row = set_fields(s, row, sweep, number, fields)
    row.attempts = int(row.attempts or 0) + 1
    s.flush()
    return int(row.attempts)
