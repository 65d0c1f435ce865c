"""The per-sweep claim lock: one process at a time asks a sweep's scheduler and records what
it got, so any number of controllers and workers never exceed the budget, never run one
trial twice, and never leave a suggestion without its record.

The lock must not be a write transaction on the database itself: the scheduler writes through
its own connections (Optuna's storage) while the lock is held, and SQLite has a single writer,
so a transaction held across those writes would deadlock. Instead:

* PostgreSQL (many hosts): a session-level advisory lock (``pg_advisory_lock``) on a dedicated
  connection, keyed by the sweep's name; the server releases it if the holder dies. The
  threads of one process (workers run in threads share one connection pool:
  :mod:`.engine`) queue on a lock of the process first, so at most one connection of a
  process waits for a sweep's lock, however many of its threads ask: waiters cannot take
  every pooled connection from the holder, which needs some for its own queries.
* SQLite (one host): an OS file lock beside the database file (``filelock``), released by the
  kernel if the holder dies.
"""

from __future__ import annotations

import os
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa
from filelock import FileLock, Timeout
from sqlalchemy.engine import Engine

from hyperfleet.platform.storage.engine import sqlite_path


def _key(sweep: str) -> int:
    """A 63-bit advisory lock key for ``sweep`` (stable across processes and hosts)."""
    return (zlib.crc32(b"hyperfleet-claim") << 31) ^ zlib.crc32(sweep.encode())


_LOCAL: dict[tuple[int, str, str], threading.RLock] = {}
_LOCAL_GUARD = threading.Lock()


def local_lock(engine: Engine, name: str) -> threading.RLock:
    """This process's lock named ``name`` for ``engine``'s database, in front of an advisory
    lock of the same name: the threads of a process queue on it, so at most one of the
    process's pooled connections waits for the advisory lock (a forked child has its own: a
    lock held by another thread at the fork would never be released in the child)."""
    key = (os.getpid(), engine.url.render_as_string(hide_password=True), name)
    with _LOCAL_GUARD:
        return _LOCAL.setdefault(key, threading.RLock())


def _file(path: Path, sweep: str) -> str:
    """The claim lock's file beside the SQLite database ``path``."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in sweep)
    return str(path.parent / f".{path.name}.{safe}.claim.lock")


@contextmanager
def claim_lock(engine: Engine, url: str, sweep: str) -> Iterator[None]:
    """Hold the sweep's claim lock for the duration of the block (see the module docstring)."""
    if engine.dialect.name == "postgresql":
        with local_lock(engine, sweep), engine.connect() as conn:
            conn.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": _key(sweep)})
            conn.commit()
            try:
                yield
            finally:
                conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": _key(sweep)})
                conn.commit()
        return
    path = sqlite_path(url)
    if path is None:  # in memory: one process
        yield
        return
    with FileLock(_file(path, sweep)):
        yield


@contextmanager
def try_claim_lock(engine: Engine, url: str, sweep: str) -> Iterator[bool]:
    """The sweep's claim lock if it is free now (True inside the block), else False at once:
    for work that another holder makes unnecessary (suggestions made ahead)."""
    if engine.dialect.name == "postgresql":
        local = local_lock(engine, sweep)
        if not local.acquire(blocking=False):
            yield False
            return
        try:
            with engine.connect() as conn:
                got = bool(
                    conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": _key(sweep)})
                    .scalar()
                )  # fmt: skip
                conn.commit()
                try:
                    yield got
                finally:
                    if got:
                        conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": _key(sweep)})
                        conn.commit()
        finally:
            local.release()
        return
    path = sqlite_path(url)
    if path is None:
        yield True
        return
    lock = FileLock(_file(path, sweep))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        yield False
        return
    try:
        yield True
    finally:
        lock.release()


@contextmanager
def file_lock_for(url: str, what: str) -> Iterator[None]:
    """A host-wide lock named after a SQLite file (e.g. serialising the creation of a new MLflow
    store by two processes); no lock for other URLs."""
    path = sqlite_path(url) if url.startswith("sqlite:") else None
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path.parent / f".{path.name}.{what}.lock")):
        yield
