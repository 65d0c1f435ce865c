"""A sweep's status as its users and its workers change it (``storage.lifecycle``).

Two kinds of writer change ``hf_sweeps.status``: a user (``sweep stop``, ``pause``, ``resume``:
:mod:`hyperfleet.platform.sweeps.lifecycle`) and the workers serving the sweep (``running`` as
one opens it, ``done`` or ``interrupted`` as the last closes it). Each write here is one
conditional ``UPDATE``, so they never undo each other whatever their order: a worker's write
never replaces a user's PAUSED or STOPPED (:data:`~hyperfleet.spec.states.SWEEP_HALTED`), and a
user's change applies only from the statuses it was checked against (a sweep that ended
between the check and the write is left as it ended, and the caller is told).

Workers read the status on their loop (:meth:`SweepLifecycle.status`: one column of one row by
its key) and leave a paused or stopped sweep (:mod:`hyperfleet.platform.controller.lifecycle`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import sqlalchemy as sa

from hyperfleet.platform.storage.part import Part
from hyperfleet.platform.storage.retry import retried
from hyperfleet.platform.storage.schema import SweepRow
from hyperfleet.spec.states import SWEEP_HALTED, SweepStatus


class SweepLifecycle(Part):
    """``hf_sweeps.status``: read it, and change it only from the statuses a change allows."""

    @retried
    def status(self, name: str) -> SweepStatus | None:
        """The sweep's status as stored (None: no such sweep)."""
        table = cast(sa.Table, SweepRow.__table__)
        with self.session() as s:
            found = s.execute(sa.select(table.c.status).where(table.c.name == name)).scalar()
        return None if found is None else SweepStatus(found)

    @retried
    def change(self, name: str, to: SweepStatus, allowed: Iterable[SweepStatus]) -> bool:
        """Set the sweep's status to ``to`` if it is one of ``allowed`` now, in one statement;
        whether it was changed."""
        table = cast(sa.Table, SweepRow.__table__)
        query = (
            sa.update(table)
            .where(table.c.name == name, table.c.status.in_([str(s) for s in allowed]))
            .values(status=to, updated_at=self.now())
        )
        with self.session() as s:
            return bool(cast(sa.CursorResult[Any], s.execute(query)).rowcount)

    def worker_sets(self, name: str, to: SweepStatus) -> bool:
        """A worker's write (``running`` as it opens the sweep, ``done`` or ``interrupted`` as
        it closes it): applied unless a user paused or stopped the sweep; whether it was. A
        status already ``to`` is not written again (a fleet's workers all write it)."""
        kept = set(SweepStatus) - set(SWEEP_HALTED) - {to}
        return self.change(name, to, kept)
