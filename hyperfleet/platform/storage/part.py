"""The base of :class:`~.store.Storage`'s parts: each part (``storage.sweeps``,
``storage.trials``, ``storage.workers``, ``storage.leases``, ``storage.gangs``,
``storage.ahead``, ``storage.stale``) is a small class of methods over the storage's shared
engine, transactions, clock and retry period, which it reads from the storage that holds it,
so a change of ``storage.retry_s`` holds for its parts too. A part is read one at a time: its
module holds its tables' queries and nothing else."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.orm import Session


class Basics(Protocol):
    """What a part reads from the storage that holds it (:class:`~.store.Storage`)."""

    url: str
    retry_s: float
    engine: sa.engine.Engine

    def session(self) -> AbstractContextManager[Session]: ...

    def now(self) -> float: ...

    def held_columns(self, s: Any, table: sa.Table) -> list[sa.Column[Any]]: ...


class Part:
    """One part of a :class:`~.store.Storage` (see the module docstring)."""

    def __init__(self, storage: Basics) -> None:
        self.storage = storage

    @property
    def url(self) -> str:
        return self.storage.url

    @property
    def retry_s(self) -> float:
        """How long a data method rides out an outage (the storage's, :mod:`.retry`)."""
        return self.storage.retry_s

    @property
    def engine(self) -> sa.engine.Engine:
        return self.storage.engine

    def session(self) -> AbstractContextManager[Session]:
        """One transaction (:meth:`.Storage.session`)."""
        return self.storage.session()

    def now(self) -> float:
        """The storage's clock (:meth:`.Storage.now`)."""
        return self.storage.now()
