"""A trial's row as writers change it: read (under its row lock), its fields set (the row
made WAITING when there is none), and the writer's fence checked.

Used by the trial records of :class:`~.store.Storage` and by the takes of suggestions made
ahead (:mod:`.ahead`), which record a claim in the same transaction as their own rows.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from hyperfleet.errors import Superseded
from hyperfleet.platform.storage.records import TRIAL_FIELDS, TrialFields, json_safe
from hyperfleet.platform.storage.schema import TrialRow
from hyperfleet.spec.states import TrialState


def check_fence(row: TrialRow | None, number: int, attempt: int) -> None:
    """:class:`Superseded` unless ``row`` is RUNNING at ``attempt``."""
    if row is not None and row.state == TrialState.RUNNING and int(row.attempts or 0) == attempt:
        return
    current = None if row is None else int(row.attempts or 0)
    if current is not None and current > attempt:
        raise Superseded(f"superseded by attempt {current}", current)
    state = "gone" if row is None else row.state
    raise Superseded(
        f"superseded: trial {number} is {state} (this copy is attempt {attempt})", current
    )


def trial_row(s: Session, sweep: str, number: int, lock: bool = False) -> TrialRow | None:
    """The trial's row in the transaction ``s`` (``lock``: under its row lock)."""
    q = sa.select(TrialRow).where(TrialRow.sweep == sweep, TrialRow.number == number)
    if lock:
        q = q.with_for_update()
    return s.scalars(q).one_or_none()


def set_fields(
    s: Session, row: TrialRow | None, sweep: str, number: int, fields: TrialFields
) -> TrialRow:
    """``fields`` set on the trial's ``row``, made (WAITING) if there is none."""
    unknown = set(fields) - TRIAL_FIELDS
    if unknown:
        raise TypeError(f"not a field of a trial's row: {', '.join(sorted(unknown))}")
    if row is None:
        row = TrialRow(sweep=sweep, number=number, state=TrialState.WAITING, attempts=0, retries=0)
        row.params, row.metrics = {}, {}
        s.add(row)
    for key, value in fields.items():
        setattr(row, key, json_safe(value) if key in ("metrics", "params") else value)
    return row
