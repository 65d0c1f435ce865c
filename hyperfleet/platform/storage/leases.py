"""The devices each launch held (``storage.leases``): a row of ``hf_leases`` per launch, which
worker held which devices of which host, from when to when, and its lane on a device shared
among small trials (the dashboard's device timeline and utilisation). A lease ends with its
trial; the leases of a trial whose worker is gone are ended by the worker that requeues it."""

from __future__ import annotations

import os
import socket
from typing import cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from hyperfleet.platform.storage.part import Part
from hyperfleet.platform.storage.records import LeaseRecord
from hyperfleet.platform.storage.retry import retried
from hyperfleet.platform.storage.schema import LeaseRow
from hyperfleet.spec.states import TrialState


class LeaseStore(Part):
    """``hf_leases``: open, close and list the leases of devices."""

    @retried
    def open(
        self, sweep: str, trial: int, devices: list[str], worker: str | None = None,
        share: int = 0, per_device: int = 1,
    ) -> int:  # fmt: skip
        """Record that this process (host, pid) holds ``devices`` for ``trial`` from now on
        (``share``: its lane on a device shared ``per_device`` ways)."""
        with self.session() as s:
            return self.insert(s, sweep, trial, devices, worker, share, per_device)

    def insert(
        self, s: Session, sweep: str, trial: int, devices: list[str], worker: str | None,
        share: int, per_device: int,
    ) -> int:  # fmt: skip
        """:meth:`open` within the caller's transaction ``s`` (a launch takes its attempt
        and its lease in one: :meth:`.TrialStore.launch_attempt`); the lease row's id."""
        row = LeaseRow(
            sweep=sweep, trial=trial, host=socket.gethostname(), pid=os.getpid(),
            devices=list(devices), started_at=self.now(), worker=worker,
            share=share, per_device=per_device,
        )  # fmt: skip
        s.add(row)
        s.flush()
        return int(row.id)

    @retried
    def close(self, lease_id: int, state: TrialState) -> None:
        with self.session() as s:
            row = s.get(LeaseRow, lease_id)
            if row is not None and row.ended_at is None:
                row.ended_at, row.state = self.now(), state

    @retried
    def close_open(self, sweep: str, trial: int, state: TrialState) -> int:
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
    def all(self, sweep: str | None = None) -> list[LeaseRecord]:
        """Every lease (of ``sweep``), oldest first; read with the columns the database has,
        so a reader of a database an older hyperfleet wrote sees its leases as whole."""
        table = cast(sa.Table, LeaseRow.__table__)
        with self.session() as s:
            columns = self.storage.held_columns(s, table)
            if not columns:  # a database from before hf_leases
                return []
            q = sa.select(*columns).order_by(table.c.id)
            if sweep is not None:
                q = q.where(table.c.sweep == sweep)
            return [LeaseRecord.of_mapping(r) for r in s.execute(q).mappings()]
