"""Engines for the platform's database: SQLite (single host) or PostgreSQL (many hosts).

SQLite is opened in WAL mode with a long busy timeout, so a running sweep, its trial processes
and readers don't lock each other out, and with ``synchronous=NORMAL``, SQLite's recommended
setting for WAL: a commit survives a crash of any process (what the platform must survive)
without an fsync per commit; only a power loss can lose the last commits.

A *read-only* engine (``sweep status``, ``sweep list``, the dashboard) never creates the
database file and cannot write: SQLite is opened with ``mode=rw`` (a missing file is an error,
not a new empty database) and ``query_only``; PostgreSQL sessions start with
``default_transaction_read_only``.

**One pool per process, and one for heartbeats.** Every ``Storage`` of one process on one
PostgreSQL URL (a worker's registry, each sweep it serves, rank 0's recorders of its simulated
or in-process trials, many workers run as threads) shares one engine (:func:`shared_engine`):
one bounded pool of at most ``POOL_SIZE + POOL_OVERFLOW`` connections, of which ``POOL_SIZE``
stay open when idle. Heartbeats have a lane of their own (``lane="heartbeat"``: at most
``HEARTBEAT_POOL_SIZE + HEARTBEAT_POOL_OVERFLOW``): a worker that is alive must be able to
say so while its work fills the other pool (1,000 simulated workers in processes of 50, their
trials launched together: heartbeats waited 30 s for a pooled connection and failed, and other
workers took theirs for lost). A process therefore holds a few connections however
many of them it opens; the database's ``max_connections`` must exceed the processes' pools
together (``docs/scale.md``: sizing, and PgBouncer). A controller process (``sweep run``, a
worker) may hold :data:`CONNECTIONS_NEEDED` at once; it checks the role's and the database's
``CONNECTION LIMIT`` and the server's ``max_connections`` against that number when it opens
the storage and stops with one line naming both (:func:`connection_problem`).

**No ping before use** on the engines that write: a pooled connection that the server dropped
(a restart, an idle timeout) fails its statement, SQLAlchemy then discards every connection of
the pool older than the failure, and the storage's retry (:mod:`.retry`, around every write and
every claim) runs the operation again on a fresh one. A ping per checkout would add a round
trip to each of the claim's statements, under the sweep's claim lock. Read-only engines (``sweep
status``, the dashboard), whose reads are not retried, still ping.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, Generic, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, make_url

from hyperfleet.errors import StorageError
from hyperfleet.platform.credentials import mask_text, masked, reveal
from hyperfleet.platform.urls import storage_problem

SQLITE_TIMEOUT_S = 60
POOL_SIZE = 5  # PostgreSQL connections an engine keeps open (SQLAlchemy's default)
POOL_OVERFLOW = 10  # more while it is busy, closed when given back
HEARTBEAT_POOL_SIZE = 1  # the heartbeat lane's (a worker process beats every few seconds)
HEARTBEAT_POOL_OVERFLOW = 4
LANES = ("work", "heartbeat")
# What one controller process (``sweep run``, ``hyperfleet worker``) may hold at once: its work
# pool, its heartbeat lane and Optuna's own engine (same sizes as the work pool); checked
# against the role's and the database's CONNECTION LIMIT when it opens (:func:`connection_problem`)
CONNECTIONS_NEEDED = 2 * (POOL_SIZE + POOL_OVERFLOW) + HEARTBEAT_POOL_SIZE + HEARTBEAT_POOL_OVERFLOW

T = TypeVar("T")


class Shared(Generic[T]):
    """Objects a process shares among its users under a key, each counted: made on first use,
    closed when the last user gives it back. The key holds the pid: a forked child makes its
    own (sockets are not shared across processes)."""

    def __init__(self, close: Callable[[T], None]) -> None:
        self._close = close
        self._lock = threading.Lock()
        self._entries: dict[Hashable, list[Any]] = {}  # key -> [object, users]

    def take(self, key: Hashable, make: Callable[[], T]) -> T:
        with self._lock:
            entry = self._entries.get((os.getpid(), key))
            if entry is None:
                entry = self._entries[(os.getpid(), key)] = [make(), 0]
            entry[1] += 1
            return entry[0]  # type: ignore[no-any-return]

    def give_back(self, obj: T) -> None:
        """One user is done with ``obj``: closed when it was the last (or never shared)."""
        with self._lock:
            for key, entry in self._entries.items():
                if entry[0] is obj:
                    entry[1] -= 1
                    if entry[1] > 0:
                        return
                    del self._entries[key]
                    break
        self._close(obj)


_ENGINES: Shared[Engine] = Shared(lambda engine: engine.dispose())


def parse_url(url: str) -> URL:
    """``url`` parsed; ``StorageError`` (one line, no password) unless the platform runs on it:
    SQLite, or PostgreSQL through psycopg (:func:`hyperfleet.platform.urls.storage_problem`)."""
    problem = storage_problem(url)
    if problem is not None:
        raise StorageError(problem)
    return make_url(url)


def sqlite_path(url: str) -> Path | None:
    """The database file of a ``sqlite:///`` URL (None: another backend, or in memory)."""
    parsed = parse_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def _on_sqlite_connect(readonly: bool) -> Any:
    def setup(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        if readonly:
            cur.execute("PRAGMA query_only=ON")
        else:
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute(f"PRAGMA busy_timeout={SQLITE_TIMEOUT_S * 1000}")
        cur.close()

    return setup


def readonly_url(url: str) -> str:
    """``url`` as a reader opens it: a SQLite file that must exist (never created)."""
    path = sqlite_path(url)
    if path is None:
        return url
    if not path.is_file():
        raise StorageError(f"storage: no database at {path}; check --storage (nothing was created)")
    return f"sqlite:///file:{path.resolve()}?mode=rw&uri=true"


def engine_kwargs(url: str, readonly: bool = False, lane: str = "work") -> dict[str, Any]:
    """``create_engine`` arguments for ``url`` (also given to Optuna's RDBStorage); ``lane``:
    the work's pool or the heartbeats' (see the module docstring)."""
    if parse_url(url).get_backend_name() == "sqlite":
        return {"connect_args": {"timeout": SQLITE_TIMEOUT_S}}
    kwargs: dict[str, Any] = (
        {"pool_size": POOL_SIZE, "max_overflow": POOL_OVERFLOW}
        if lane == "work"
        else {"pool_size": HEARTBEAT_POOL_SIZE, "max_overflow": HEARTBEAT_POOL_OVERFLOW}
    )
    if readonly:
        kwargs["connect_args"] = {"options": "-c default_transaction_read_only=on"}
        kwargs["pool_pre_ping"] = True  # readers (status, dashboard) are not retried
    return kwargs


def create_engine(url: str, readonly: bool = False, lane: str = "work") -> Engine:
    """A SQLAlchemy engine for ``url`` (see the module docstring)."""
    if lane not in LANES:
        raise ValueError(f"lane: {lane!r} is not one of {LANES}")
    backend = parse_url(url).get_backend_name()
    if backend == "sqlite":
        if readonly:
            url = readonly_url(url)
        else:
            path = sqlite_path(url)
            if path is not None:
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise StorageError(
                        f"storage: cannot create {path.parent} ({exc.strerror}); "
                        f"give a writable path"
                    ) from None
    try:
        engine = sa.create_engine(url, **engine_kwargs(url, readonly, lane))
    except (sa.exc.ArgumentError, ImportError) as exc:
        shown = masked(url)
        raise StorageError(f"storage: cannot use {shown!r} ({mask_text(str(exc))})") from None
    configure_sqlite(engine, readonly)
    return engine


def configure_sqlite(engine: Engine, readonly: bool = False) -> None:
    """Set up every connection of a SQLite ``engine`` as described in the module docstring
    (for engines made elsewhere too: Optuna's); connections already pooled are dropped."""
    if engine.dialect.name != "sqlite":
        return
    event.listen(engine, "connect", _on_sqlite_connect(readonly))
    engine.dispose()


def shared_engine(url: str, readonly: bool = False, lane: str = "work") -> Engine:
    """PostgreSQL: this process's one engine for ``url`` in ``lane`` (see the module
    docstring), made on first use; SQLite: a new engine (:func:`create_engine`). Give it back
    with :func:`release_engine`."""
    if parse_url(url).get_backend_name() != "postgresql":
        return create_engine(url, readonly)
    return _ENGINES.take((url, readonly, lane), lambda: create_engine(url, readonly, lane))


def connection_problem(engine: Engine) -> str | None:
    """Why a controller process cannot get the PostgreSQL connections it needs
    (:data:`CONNECTIONS_NEEDED`): the role's or the database's ``CONNECTION LIMIT``, or the
    server's ``max_connections``, is below it; one line, or None (SQLite: None)."""
    if engine.dialect.name != "postgresql":
        return None
    query = sa.text(
        "SELECT current_user, r.rolconnlimit, d.datconnlimit, "
        "current_setting('max_connections')::int FROM pg_roles r, pg_database d "
        "WHERE r.rolname = current_user AND d.datname = current_database()"
    )
    with engine.connect() as conn:
        row = conn.execute(query).one_or_none()
    if row is None:
        return None
    user, role_limit, db_limit, server_limit = row
    n = CONNECTIONS_NEEDED
    limits = [
        (role_limit, f"role {user}'s CONNECTION LIMIT {role_limit}",
         f"ALTER ROLE {user} CONNECTION LIMIT {n}"),
        (db_limit, f"the database's CONNECTION LIMIT {db_limit}",
         f"ALTER DATABASE … CONNECTION LIMIT {n}"),
        (server_limit, f"the server's max_connections {server_limit}",
         f"max_connections = {n} or more in postgresql.conf"),
    ]  # fmt: skip
    for limit, what, fix in limits:
        if 0 <= limit < n:
            return too_few_connections(what, fix)
    return None


def too_few_connections(what: str, fix: str = "ALTER ROLE … CONNECTION LIMIT …") -> str:
    """The one line for a run that cannot get its connections (``what``: the limit)."""
    return (
        f"storage: a run needs {CONNECTIONS_NEEDED} connections to PostgreSQL for its sweep run "
        f"or worker process (more for each trial's own processes: docs/scale.md), but {what} "
        f"allows fewer; raise it ({fix}) or use another role"
    )


def release_engine(engine: Engine) -> None:
    """One user of ``engine`` is done with it: closed when it was the last (or not shared)."""
    _ENGINES.give_back(engine)


_OPTUNA: Shared[Any] = Shared(lambda rdb: rdb.engine.dispose())  # Optuna's RDBStorage


def _new_optuna(url: str, readonly: bool, create: bool) -> Any:
    import optuna

    where = readonly_url(url) if readonly else url
    rdb = optuna.storages.RDBStorage(
        reveal(where),
        engine_kwargs=engine_kwargs(url, readonly),
        skip_compatibility_check=not create,
        skip_table_creation=not create,
    )
    configure_sqlite(rdb.engine, readonly)
    return rdb


def shared_optuna(url: str, readonly: bool, create: bool) -> Any:
    """Optuna's ``RDBStorage`` on ``url``: on PostgreSQL one per process (thread-safe, as
    Optuna's threaded ``optimize`` uses it), so its pool is shared as the platform's engine
    is; on SQLite a new one. Give it back with :func:`release_optuna`."""
    if not url.startswith("postgresql"):
        return _new_optuna(url, readonly, create)
    return _OPTUNA.take((url, readonly, create), lambda: _new_optuna(url, readonly, create))


def release_optuna(rdb: Any) -> None:
    """One user of ``rdb`` is done with it: its engine closed when it was the last."""
    _OPTUNA.give_back(rdb)
