"""Trials that span hosts (``storage.gangs``): a gang per launch of a trial with
``resources.nodes > 1``. The leader (node 0) opens it with the rendezvous endpoint and the
spec; workers join as the other nodes until it is full; an unfilled gang is given up by its
leader at its deadline."""

from __future__ import annotations

from dataclasses import fields

import sqlalchemy as sa

from hyperfleet.platform.storage.part import Part
from hyperfleet.platform.storage.records import GangRecord
from hyperfleet.platform.storage.retry import retried
from hyperfleet.platform.storage.schema import GangRow
from hyperfleet.spec.states import GangState


class GangStore(Part):
    """``hf_gangs``: open, list, join and end the gangs of trials across hosts."""

    @retried
    def open(self, gang: GangRecord) -> int:
        with self.session() as s:
            values = {f.name: getattr(gang, f.name) for f in fields(GangRecord) if f.name != "id"}
            row = GangRow(**values)
            s.add(row)
            s.flush()
            return int(row.id)

    @retried
    def of(self, sweep: str, state: GangState | None = None) -> list[GangRecord]:
        with self.session() as s:
            q = sa.select(GangRow).where(GangRow.sweep == sweep).order_by(GangRow.id)
            if state is not None:
                q = q.where(GangRow.state == state)
            return [GangRecord.of(r) for r in s.scalars(q)]

    @retried
    def join(self, gang_id: int, worker: str) -> int | None:
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
    def set_state(self, gang_id: int, state: GangState) -> None:
        with self.session() as s:
            row = s.get(GangRow, gang_id)
            if row is not None:
                row.state = state
