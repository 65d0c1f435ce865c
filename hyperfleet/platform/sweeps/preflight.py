"""Checks made before a sweep writes anything: bad flags and unreachable services fail at once.

Each raises :class:`ConfigError` or :class:`StorageError` with one line that names the flag or
field and the fix (the CLI prints it and exits 2): a working directory that can't be created
or written, a storage that can't be opened, a tracking server that doesn't answer within a few
seconds. Only then is the sweep created in storage and MLflow.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path

import sqlalchemy as sa

from hyperfleet.errors import ConfigError, StorageError, first_line
from hyperfleet.platform.credentials import masked, reveal
from hyperfleet.platform.storage.engine import parse_url, sqlite_path
from hyperfleet.platform.storage.retry import login_refused, refused_message
from hyperfleet.platform.urls import storage_problem, tracking_problem

CONNECT_TIMEOUT_S = 5


def writable_dir(path: str | Path, field: str) -> Path:
    """``path`` created if missing; ``ConfigError`` naming ``field`` if it can't be written."""
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"{field}: cannot create {p} ({exc.strerror}); give a writable directory"
        ) from None
    if not os.access(p, os.W_OK | os.X_OK):
        raise ConfigError(f"{field}: {p} is not writable; give a writable directory")
    return p


def check_urls(storage: str | None = None, tracking: str | None = None) -> None:
    """The storage URL and the tracking URI have schemes the platform runs on (no I/O: call it
    before anything is written); ``ConfigError`` naming the option otherwise."""
    problems = [storage_problem(storage) if storage is not None else None]
    problems.append(tracking_problem(tracking) if tracking is not None else None)
    found = [p for p in problems if p is not None]
    if found:
        raise ConfigError(found)


def check_storage(url: str) -> None:
    """The storage can be opened (a SQLite file's folder writable, a server answering)."""
    parsed = parse_url(url)
    path = sqlite_path(url)
    if path is not None:
        writable_dir(path.parent, "storage")
        if path.exists() and not os.access(path, os.R_OK | os.W_OK):
            raise StorageError(f"storage: {path} is not readable and writable; check its mode")
        return
    if parsed.get_backend_name() == "sqlite":
        return  # in memory
    _check_server(url, parsed, "storage")


def _check_server(url: str, parsed: sa.engine.URL, field: str) -> None:
    """The database server at ``url`` answers and takes the login: else one line naming
    ``field`` (``StorageError`` for the storage, ``ConfigError`` for ``tracking.uri``: MLflow
    itself would retry a refused login for minutes)."""
    error = StorageError if field == "storage" else ConfigError
    args = (
        {"connect_timeout": CONNECT_TIMEOUT_S} if parsed.get_backend_name() == "postgresql" else {}
    )
    engine = sa.create_engine(reveal(url), connect_args=args, pool_pre_ping=False)
    safe = parsed.render_as_string(hide_password=True)
    try:
        with engine.connect():
            pass
    except sa.exc.DBAPIError as exc:
        reason = login_refused(exc)
        if reason is not None and field == "storage":
            raise StorageError(refused_message(reason, url)) from None
        if reason is not None:
            raise error(
                f"{field}: {safe} refused the login ({reason}); fix the user, password or "
                f"database name in --tracking-uri (or the sweep file's {field})"
            ) from None
        first = first_line(exc.orig or exc)
        raise error(
            f"{field}: cannot connect to {safe} ({first}); start the server or fix the URL"
        ) from None
    except ImportError as exc:
        raise error(f"{field}: cannot use {masked(url)!r} ({exc})") from None
    finally:
        engine.dispose()


def check_destinations(storage_url: str, tracking_uri: str) -> None:
    """:func:`check_storage` and :func:`check_tracking` in the order that writes nothing before
    a refusal: servers first (a refused login or a dead server leaves no folder behind), then
    the local stores, whose folders are created."""

    def remote(url: str) -> bool:
        return "://" in url and not url.startswith(("sqlite:", "file:"))

    checks = [(check_storage, storage_url), (check_tracking, tracking_uri)]
    for check, url in sorted(checks, key=lambda c: not remote(c[1])):
        check(url)


def check_tracking(uri: str) -> None:
    """An MLflow tracking URI that can be used: a server that answers ``/health`` within a
    few seconds, a database server that takes the login, or a local store whose folder can be
    created."""
    check_urls(tracking=uri)
    if uri.startswith(("http://", "https://")):
        health = uri.rstrip("/") + "/health"
        try:
            with urllib.request.urlopen(health, timeout=CONNECT_TIMEOUT_S) as resp:
                resp.read()
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ConfigError(
                f"tracking.uri: no MLflow server answers at {masked(uri)} ({reason}); start it "
                f"(mlflow server) or fix tracking.uri / --tracking-uri"
            ) from None
        return
    path = sqlite_path(uri) if uri.startswith("sqlite:") else None
    if path is not None:
        writable_dir(path.parent, "tracking.uri")
    elif uri.startswith("file:") or "://" not in uri:
        writable_dir(uri.removeprefix("file://").removeprefix("file:"), "tracking.uri")
    else:  # a database (tracking_problem allowed it)
        _check_server(uri, sa.engine.make_url(uri), "tracking.uri")
