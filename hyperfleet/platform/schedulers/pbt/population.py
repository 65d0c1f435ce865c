"""What a population-based scheduler (PBT, PB2) asks of the store that keeps its population.

A population scheduler holds no state in memory: every member lives in a
:class:`PopulationStore`, so a scheduler object can be rebuilt in any process and several may
report and decide at the same time. Every read-modify-write is one
:meth:`PopulationStore.transaction`, serialised per sweep, in which the scheduler reads the
members (:meth:`PopulationTxn.members`), puts changed ones back and records lineage events
(each at most once); one that changes a single member from its own state alone (a report, a
decision that is not a ready check) may be a :meth:`PopulationStore.member_transaction`, which
serialises with the population transactions but not with the other members'. The platform's
store is
:class:`hyperfleet.platform.storage.population.SqlPopulationStore` (its docstring says how it
serialises); :class:`MemoryPopulationStore` is a process-local one for tests. The records
(:class:`Member`, :class:`LineageEvent`) are storage's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict
from typing import Protocol

from hyperfleet.platform.storage.population import (
    LineageEvent,
    Member,
    MemberState,
    PopulationConflictError,
    lineage_key,
    replay_schedule,
)

__all__ = [
    "LineageEvent",
    "Member",
    "MemberState",
    "MemberTxn",
    "MemoryPopulationStore",
    "PopulationConflictError",
    "PopulationStore",
    "PopulationTxn",
    "now",
    "replay_schedule",
]


class PopulationTxn(Protocol):
    """The view of one sweep inside a transaction."""

    def members(self) -> dict[int, Member]:
        """Every member of the sweep, by number."""
        ...

    def fresh(self, number: int) -> Member | None:
        """Member ``number`` as it is now, held so that nothing else changes it until the
        transaction ends (the rest of :meth:`members` may be a moment old: a report of another
        member can commit meanwhile)."""
        ...

    def put(self, member: Member) -> None:
        """Insert or replace a member (``PopulationConflictError`` if another transaction changed
        it since it was read: the caller decides again)."""
        ...

    def add_lineage(self, event: LineageEvent) -> bool:
        """Record ``event``; False (and nothing written) if its key is already there."""
        ...


class MemberTxn(Protocol):
    """The view of one member inside a transaction that changes that member alone."""

    def member(self) -> Member | None:
        """The member (None if it is not in the population yet)."""
        ...

    def put(self, member: Member) -> None:
        """Replace the member (only this one)."""
        ...

    def members(self) -> dict[int, Member]:
        """Every member, as committed (this one as put): for reads, never to decide on."""
        ...


class PopulationStore(Protocol):
    """Where population state lives (see the module docstring)."""

    def transaction(
        self, sweep: str, exclusive: bool = True
    ) -> AbstractContextManager[PopulationTxn]:
        """A context manager yielding a :class:`PopulationTxn`; commits on a clean exit.
        ``exclusive=False``: it may run beside other non-exclusive ones (never beside an
        exclusive one), so it must hold (``fresh``) every member whose state it acts on."""
        ...

    def member_transaction(self, sweep: str, number: int) -> AbstractContextManager[MemberTxn]:
        """A context manager yielding a :class:`MemberTxn` of member ``number``; commits on a
        clean exit. It waits for a population transaction and is waited for by one."""
        ...

    def lineage(self, sweep: str, member: int | None = None) -> list[LineageEvent]:
        """The sweep's lineage events in the order they were written."""
        ...

    def members(self, sweep: str) -> dict[int, Member]:
        """Every member of the sweep, by number (a consistent read)."""
        ...


# --------------------------------------------------------------------------- in memory


class _MemoryTxn:
    def __init__(self, members: dict[int, Member], events: list[LineageEvent]) -> None:
        self._members = members
        self._events = events
        self._keys = {lineage_key(e) for e in events}

    def members(self) -> dict[int, Member]:
        return dict(self._members)

    def fresh(self, number: int) -> Member | None:
        return self._members.get(number)

    def put(self, member: Member) -> None:
        self._members[member.number] = member  # frozen, and never changed in place

    def add_lineage(self, event: LineageEvent) -> bool:
        if lineage_key(event) in self._keys:
            return False
        self._keys.add(lineage_key(event))
        self._events.append(event)
        return True


class _MemoryMemberTxn:
    def __init__(self, members: dict[int, Member], number: int) -> None:
        self._members = members
        self._number = number

    def member(self) -> Member | None:
        return self._members.get(self._number)

    def put(self, member: Member) -> None:
        if member.number != self._number:
            raise ValueError(f"member {member.number} written in member {self._number}'s txn")
        self._members[member.number] = member

    def members(self) -> dict[int, Member]:
        return dict(self._members)


class MemoryPopulationStore:
    """A process-local store for tests; transactions are serialised by a lock."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._members: dict[str, dict[int, Member]] = {}
        self._events: dict[str, list[LineageEvent]] = {}

    @contextmanager
    def transaction(self, sweep: str, exclusive: bool = True) -> Iterator[PopulationTxn]:
        with self._lock:  # changes are made on copies and kept only on a clean exit
            members = dict(self._members.get(sweep, {}))
            events = list(self._events.get(sweep, []))
            n_before = len(events)
            yield _MemoryTxn(members, events)
            stamped = [
                LineageEvent(**{**asdict(e), "seq": n_before + i + 1})
                for i, e in enumerate(events[n_before:])
            ]
            self._members[sweep] = members
            self._events[sweep] = events[:n_before] + stamped

    @contextmanager
    def member_transaction(self, sweep: str, number: int) -> Iterator[MemberTxn]:
        with self._lock:
            members = dict(self._members.get(sweep, {}))
            yield _MemoryMemberTxn(members, number)
            self._members[sweep] = members

    def lineage(self, sweep: str, member: int | None = None) -> list[LineageEvent]:
        with self._lock:
            events = list(self._events.get(sweep, []))
        return [e for e in events if member is None or e.member == member]

    def members(self, sweep: str) -> dict[int, Member]:
        with self.transaction(sweep) as txn:
            return txn.members()


def now() -> float:
    return time.time()
