"""The sweeps' records (``storage.sweeps``): one row of ``hf_sweeps`` per sweep, holding its
validated config and its status."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Unpack

import sqlalchemy as sa

from hyperfleet.platform.storage.part import Part
from hyperfleet.platform.storage.records import SweepFields, SweepRecord
from hyperfleet.platform.storage.retry import retried
from hyperfleet.platform.storage.schema import SweepRow
from hyperfleet.spec.states import SweepStatus


class SweepStore(Part):
    """``hf_sweeps``: get, create, update and list the sweeps."""

    @retried
    def get(self, name: str) -> SweepRecord | None:
        with self.session() as s:
            row = s.get(SweepRow, name)
            return None if row is None else SweepRecord.of(row)

    @retried
    def create(self, name: str, config: Mapping[str, Any]) -> SweepRecord:
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
            existing = self.get(name)
            assert existing is not None
            return existing
        return SweepRecord.of(row)

    @retried
    def update(self, name: str, **fields: Unpack[SweepFields]) -> None:
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

    @retried
    def all(self) -> list[SweepRecord]:
        """Every sweep, oldest first."""
        with self.session() as s:
            q = sa.select(SweepRow).order_by(SweepRow.created_at)
            return [SweepRecord.of(r) for r in s.scalars(q)]
