"""Riding out a storage outage: a database write that fails because the server went away is
retried with backoff for a while before anyone gives up.

Every piece of a sweep's state lives in its database, so a short outage (a PostgreSQL restart,
a network blip) must not kill a controller or a trial. :func:`retrying` re-runs an operation
whose failure is *transient* — the connection was refused, dropped or invalidated, SQLite was
busy, the process's pool had no connection free within its timeout — every 0.5 s doubling to
5 s, for up to ``budget_s`` seconds (default 120, the sweep file's ``storage_retry``), then
raises :class:`StorageOutageError`. Operations retried this way are
idempotent (upserts, ``tell`` of a finished trial, requeues), so a retry after a commit whose
answer was lost changes nothing. Anything else (a constraint, a schema error) fails at once.
Writers' pools do not ping a connection before each use (a round trip per checkout, on the
claim's critical path): a pooled connection the server ended is found on use instead, and
the first such failure is tried again at once, with a new connection and without a warning.

A server that answers but refuses the login (a wrong password, a role or database that does not
exist, no ``pg_hba.conf`` entry for this host) is not an outage: waiting can't fix it.
:func:`login_refused` recognises it by the server's SQLSTATE (class 28, invalid authorization;
3D000, no such database) or, for a refusal during the connection handshake (which libpq reports
as text only), by PostgreSQL's own wording; it fails at once with one line
(:func:`refused_message`) naming the server's reason and the fix.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

import sqlalchemy as sa

from hyperfleet.errors import StorageError, StorageOutageError, first_line
from hyperfleet.platform.clock import DEFAULT_RETRY_S as DEFAULT_RETRY_S  # its home

logger = logging.getLogger(__name__)
T = TypeVar("T")

_TRANSIENT_SQLITE = ("locked", "busy", "disk i/o", "unable to open")


_REFUSED_STATES = ("28", "3D000")  # invalid authorization; no such database
_REFUSED_WORDS = (
    "authentication failed",
    "no password supplied",
    "does not exist",
    "no pg_hba.conf entry",
    "pg_hba.conf rejects",
    "permission denied for database",
)


def _chain(exc: BaseException | None) -> list[BaseException]:
    seen: list[BaseException] = []
    while exc is not None and all(exc is not e for e in seen):
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def login_refused(exc: BaseException) -> str | None:
    """The server's reason when ``exc`` (or what it wraps) is a refused PostgreSQL login
    (see the module docstring), else None."""
    for e in _chain(exc):
        if "psycopg" not in type(e).__module__:
            continue
        state = str(getattr(e, "sqlstate", None) or "")
        text = " ".join(str(e).split())
        if state.startswith(_REFUSED_STATES) or (
            type(e).__name__ == "OperationalError"
            and any(word in text.lower() for word in _REFUSED_WORDS)
        ):
            return text.rpartition("FATAL:")[2].strip() or text
    return None


def refused_message(reason: str, url: str | None = None) -> str:
    """The one line for a refused login; ``url`` is shown without its password."""
    from hyperfleet.platform.urls import masked

    where = f"{masked(url)} " if url else "the database "
    return (
        f"storage: {where}refused the login ({reason}); fix the user, password or database "
        f"name in --storage (or the sweep file's storage), or the server's pg_hba.conf"
    )


def transient(exc: BaseException) -> bool:
    """True when ``exc`` (or what it wraps) says the database was unreachable, not wrong."""
    if login_refused(exc) is not None:
        return False
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, sa.exc.TimeoutError):
            return True  # every connection of this process's pool was in use: a busy moment
        if isinstance(exc, sa.exc.DBAPIError):
            if exc.connection_invalidated or isinstance(exc, sa.exc.InterfaceError):
                return True
            if isinstance(exc, sa.exc.OperationalError):
                text = str(exc.orig).lower()
                sqlite = "sqlite" in type(exc.orig).__module__
                return not sqlite or any(word in text for word in _TRANSIENT_SQLITE)
            return False
        if type(exc).__name__ in ("OperationalError", "InterfaceError") and "psycopg" in (
            type(exc).__module__
        ):
            return True
        nxt = exc.__cause__ or exc.__context__
        exc = nxt  # type: ignore[assignment]
    return False


def _stale_connection(exc: BaseException) -> bool:
    """True when ``exc`` is a pooled connection found dead on use (the server ended it, e.g.
    at a restart): SQLAlchemy has invalidated the pool, so the next try connects afresh."""
    return any(isinstance(e, sa.exc.DBAPIError) and e.connection_invalidated for e in _chain(exc))


def retrying(
    fn: Callable[[], T],
    budget_s: float = DEFAULT_RETRY_S,
    what: str = "storage",
    sleep: Callable[[float], None] = time.sleep,
    url: str | None = None,
) -> T:
    """``fn()``, retried while it fails transiently, for up to ``budget_s`` seconds; a refused
    login is a ``StorageError`` at once (``url``, if given, is named in it)."""
    start = time.monotonic()
    delay, warned, fresh = 0.5, -1.0, False
    while True:
        try:
            return fn()
        except Exception as exc:
            if not fresh and _stale_connection(exc) and login_refused(exc) is None:
                fresh = True  # what a ping before each checkout did: connect again, at once
                continue
            if not transient(exc):
                reason = login_refused(exc)
                if reason is not None:
                    raise StorageError(refused_message(reason, url)) from exc
                raise
            waited = time.monotonic() - start
            if waited >= budget_s:
                reason = first_line(getattr(exc, "orig", None) or exc, 200)
                outage = StorageOutageError(
                    f"{what}: unreachable for {waited:.0f} s ({reason}); stopped cleanly: "
                    f"running trials go back in the queue when the sweep runs again"
                )
                outage.outage = f"{what}: unreachable for {waited:.0f} s ({reason})"
                raise outage from exc
            if warned < 0 or waited - warned >= 10:
                first = first_line(getattr(exc, "orig", None) or exc, 200)
                logger.warning(
                    "%s unreachable (%s); retrying for up to %g s", what, first, budget_s
                )
                warned = waited
            sleep(min(delay, max(0.0, budget_s - waited)))
            delay = min(delay * 2, 5.0)


F = TypeVar("F", bound=Callable[..., Any])


def retried(method: F) -> F:
    """A storage method retried through an outage for its object's ``retry_s`` seconds."""

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        url = getattr(self, "url", None)
        return retrying(lambda: method(self, *args, **kwargs), self.retry_s, url=url)

    return cast(F, call)
