"""Why a trial failed, in one line, and when a sweep stops for failures that repeat.

A failed trial's stored error is its last launch's exit code and the end of its log. Its
*failure line* is the exception the workload or program raised last (``RuntimeError: loss
diverged``), found as a reader of a traceback finds it: the last line that reads as an
exception (a dotted name ending in ``Error``, ``Exception``, ``Interrupt`` or ``Exit``, then
its message), whatever follows it in the log. A wrapper that only says a process failed is
passed over: torchrun's agent ends a multi-rank trial's log with ``ChildFailedError`` and a
table of ranks, times and pids, below the ranks' own tracebacks. A failure without an
exception (a timeout, a lost worker, a missing objective) is named by its last line.

Two rules compare failure lines, so a deterministic error is not paid for again and again:

* a launch that raises the same exception (type and message) as the trial's previous failure
  is not retried (:func:`hyperfleet.platform.controller.outcomes.failed`);
* a sweep whose first ``budget.stop_after_alike_failures`` trials to end all FAILed with the
  same failure line launches no more trials (:func:`alike_failures`, :class:`AlikeWatch`).
  Once that many trials have ended the answer never changes, so every worker of a fleet
  reaches the same one from storage alone, and ``sweep status`` says it from the records.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import sqlalchemy as sa

from hyperfleet.platform.storage.schema import TrialRow
from hyperfleet.platform.storage.store import Storage
from hyperfleet.spec.states import FINISHED, TrialState

_RAISED = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b.*$")
_PREFIX = re.compile(r"^\[[^\]]*\]:?\s*")  # a rank's prefix: ``[rank0]: ``, ``[2] ``
_WRAPPERS = re.compile(
    r"^(torch\.distributed\.elastic\.multiprocessing\.errors\.)?ChildFailedError\b"
)

SETTING = "budget.stop_after_alike_failures"
"""The sweep file's field that sets how many alike failures stop a sweep."""


def raised(text: str) -> str | None:
    """The exception a failed trial's log or error ends with (``RuntimeError: boom``), if
    any: the last line that reads as one (a rank's ``[rank0]:`` prefix left out), torchrun's
    ``ChildFailedError`` passed over."""
    for line in reversed(text.splitlines()):
        line = _PREFIX.sub("", line.strip())
        if _RAISED.match(line) and not _WRAPPERS.match(line):
            return line
    return None


def reason(error: str | None) -> str:
    """Why a trial failed, in one line: its failure line (the last exception its error
    names), else the error's last line, or ``no reason recorded``."""
    found = raised(error or "")
    if found is not None:
        return found
    lines = [x.strip() for x in (error or "").splitlines() if x.strip()]
    return lines[-1] if lines else "no reason recorded"


class Ended(Protocol):
    """What the rule reads of a trial that ended (a :class:`TrialRecord` has it)."""

    @property
    def number(self) -> int: ...

    @property
    def state(self) -> TrialState: ...

    @property
    def ended_at(self) -> float | None: ...

    @property
    def error(self) -> str | None: ...


class EndedTrial(NamedTuple):
    """A trial that ended, as :func:`first_ended` reads it: four columns, no ORM object."""

    number: int
    state: TrialState
    ended_at: float | None
    error: str | None


def alike_failures(ended: Sequence[Ended], n: int) -> str | None:
    """The failure line shared by the first ``n`` of ``ended`` to end (by ``ended_at``, then
    number), when all ``n`` FAILed with it; None when fewer than ``n`` ended, one did not
    fail, two failed differently, or ``n`` is 0 (the rule is off)."""
    if n <= 0:
        return None
    done = [t for t in ended if t.state in FINISHED]
    first = sorted(done, key=lambda t: (_end(t), t.number))[:n]
    if len(first) < n or any(t.state != TrialState.FAIL for t in first):
        return None
    causes = {reason(t.error) for t in first}
    return causes.pop() if len(causes) == 1 else None


def _end(t: Ended) -> float:
    return math.inf if t.ended_at is None else t.ended_at


def stop_line(cause: str, n: int) -> str:
    """How a sweep stopped by :func:`alike_failures` says it."""
    first = "first trial failed" if n == 1 else f"first {n} trials failed alike"
    return (
        f"stopped: its {first} with {cause} ({SETTING}: {n}; fix the cause, "
        f"then run a new sweep, or this one again with {SETTING}: 0)"
    )


def first_ended(storage: Storage, sweep: str, n: int) -> list[EndedTrial]:
    """The sweep's first ``n`` trials to end for good (by end time, then number): the four
    columns the rule reads, on one connection (every worker asks before each claim until
    ``n`` trials have ended)."""
    t = TrialRow
    q = (
        sa.select(t.number, t.state, t.ended_at, t.error)
        .where(t.sweep == sweep, t.state.in_([str(x) for x in FINISHED]))
        .order_by(t.ended_at.is_(None), t.ended_at, t.number)
        .limit(n)
    )
    with storage.engine.connect() as conn:
        rows = conn.execute(q).all()
    return [EndedTrial(int(r[0]), TrialState(r[1]), r[2], r[3]) for r in rows]


@dataclass
class AlikeWatch:
    """One worker's view of :func:`alike_failures` for one sweep: read from storage while
    fewer than ``n`` of its trials have ended, then decided for good (no more reads)."""

    storage: Storage
    sweep: str
    n: int
    cause: str | None = field(default=None, init=False)
    decided: bool = field(default=False, init=False)

    def check(self) -> str | None:
        """The shared failure line when the sweep stops for it (None: it goes on)."""
        if self.decided or self.n <= 0:
            return self.cause
        ended = first_ended(self.storage, self.sweep, self.n)
        if len(ended) >= self.n:
            self.decided = True
            self.cause = alike_failures(ended, self.n)
        return self.cause
