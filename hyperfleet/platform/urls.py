"""Which storage URLs and MLflow tracking URIs the platform can use, checked before anything is
written.

A URL is checked by its scheme alone (no connection): SQLAlchemy's ``dialect+driver`` for the
storage, MLflow's store kinds for tracking. Only what the platform runs on is accepted: SQLite
files and PostgreSQL through psycopg (the driver installed with hyperfleet; psycopg2 where it is
installed) for storage; MLflow servers (``http(s)://``), SQLite files, PostgreSQL and local
folders (a path or ``file:``) for tracking. Anything else (``foo://``, async drivers, ``gopher://``)
is one line naming the option and the schemes accepted, instead of a traceback from deep inside
SQLAlchemy or MLflow after the working directory was made. Passwords are never echoed.
"""

from __future__ import annotations

import importlib.util
from urllib.parse import urlsplit

from hyperfleet.platform.credentials import masked

STORAGE_SCHEMES = "sqlite:///PATH, postgresql://USER@HOST/DB or postgresql+psycopg://…"
TRACKING_SCHEMES = (
    "http(s)://HOST:PORT (an MLflow server), sqlite:///PATH, postgresql://…, a folder or file:PATH"
)
_POSTGRES_DRIVERS = {None: "psycopg", "psycopg": "psycopg", "psycopg2": "psycopg2"}


def _database_problem(url: str) -> str | None:
    """Why SQLAlchemy URL ``url`` is not one the platform runs on (a reason), or None."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    if not url.isprintable():
        return f"{masked(url)!r} has a control character"
    try:
        parsed = make_url(url)
    except ArgumentError:
        return f"not a database URL: {masked(url)!r}"
    backend, driver = parsed.get_backend_name(), parsed.drivername.partition("+")[2] or None
    if backend == "sqlite" and driver in (None, "pysqlite"):
        return None
    if backend == "postgresql" and driver in _POSTGRES_DRIVERS:
        module = _POSTGRES_DRIVERS[driver]
        if importlib.util.find_spec(module) is not None:
            return None
        return f"{parsed.drivername}:// needs {module}, which is not installed"
    return f"{parsed.drivername}:// is not supported"


def storage_problem(url: str) -> str | None:
    """Why ``url`` can't be the platform's storage (a line naming ``storage``), or None."""
    reason = _database_problem(url)
    if reason is None:
        return None
    return f"storage: {reason}; use {STORAGE_SCHEMES} (--storage or the sweep file's storage)"


def tracking_problem(uri: str) -> str | None:
    """Why ``uri`` can't be an MLflow tracking URI (a line naming ``tracking.uri``), or None."""
    scheme = urlsplit(uri).scheme.lower() if uri.isprintable() else "?"
    reason: str | None = f"{scheme}:// is not supported"
    if scheme == "?":
        reason = f"{masked(uri)!r} has a control character"
    elif scheme in ("", "file", "http", "https"):
        reason = None
    elif scheme == "sqlite":
        reason = None if uri.startswith("sqlite:///") else "sqlite needs sqlite:///PATH"
    elif scheme.partition("+")[0] == "postgresql":
        reason = _database_problem(uri)
    if reason is None:
        return None
    return (
        f"tracking.uri: {reason}; use {TRACKING_SCHEMES} (--tracking-uri or the sweep file's "
        f"tracking.uri)"
    )
