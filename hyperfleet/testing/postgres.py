"""A throwaway PostgreSQL server for tests and benchmarks, and fresh databases on it.

``throwaway_server()`` starts a cluster of its own with the local ``initdb``/``pg_ctl``
(:func:`hyperfleet.platform.services.postgres.throwaway`: a free port, no fsync, a fresh
directory, removed on exit) and yields its base URL, ``postgresql://hf@127.0.0.1:PORT``, with no
database named; ``new_database(server)`` creates an empty database on it and returns its URL::

    with throwaway_server() as server:
        url = new_database(server)  # postgresql://hf@127.0.0.1:PORT/t_0123456789ab

The tests' ``postgres_server`` and ``postgres_url`` fixtures (``tests/conftest.py``) are these
two; the benchmarks use them directly. Needs Debian's ``postgresql`` package (``pg_bindir``).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

__all__ = ["new_database", "throwaway_server"]


@contextlib.contextmanager
def throwaway_server(
    prefix: str = "hyperfleet-pg-", *, max_connections: int | None = None
) -> Iterator[str]:
    """A throwaway server on loopback; yields its base URL. ``max_connections``: the server's
    limit raised (or lowered) to it before the URL is yielded (a restart: it takes effect only
    at start), as a fleet of many workers needs (``docs/scale.md``)."""
    from hyperfleet.platform.services.postgres import throwaway

    with throwaway(prefix=prefix) as pg:
        url = f"postgresql://{pg.user}@127.0.0.1:{pg.port}"
        if max_connections is not None:
            _execute(url, f"ALTER SYSTEM SET max_connections = {int(max_connections)}")
            pg.stop()
            pg.start()
        yield url


def new_database(server: str, prefix: str = "t_") -> str:
    """A fresh, empty database on ``server`` (a base URL), named ``prefix`` and a random hex
    suffix; its URL."""
    name = f"{prefix}{uuid.uuid4().hex[:12]}"
    _execute(server, f'CREATE DATABASE "{name}"')
    return f"{server}/{name}"


def _execute(server: str, statement: str) -> None:
    """``statement`` outside a transaction (``CREATE DATABASE``, ``ALTER SYSTEM``), as the
    superuser, in the ``postgres`` database."""
    import sqlalchemy as sa

    engine = sa.create_engine(f"{server}/postgres", isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(sa.text(statement))
    finally:
        engine.dispose()
