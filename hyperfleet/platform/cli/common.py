"""What every ``hyperfleet`` command shares: the consoles and the one-line error guard.

Every user error is one line on stderr and exit status 2 (3 for a storage outage; ``--debug``
shows the traceback).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import typer
from rich.console import Console

from hyperfleet.errors import ConfigError, HyperfleetError

out = Console()
err = Console(stderr=True)
T = TypeVar("T")
_state = {"debug": False}


def _guard(fn: Callable[[], T]) -> T:
    try:
        return _disk_full_as_error(fn)
    except ConfigError as exc:
        for line in exc.problems:
            err.print(f"error: {line}", markup=False, highlight=False, soft_wrap=True)
        if _state["debug"]:
            raise
        raise typer.Exit(2) from None
    except HyperfleetError as exc:
        err.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        if _state["debug"]:
            raise
        raise typer.Exit(getattr(exc, "exit_code", 2)) from None


def _disk_full_as_error(fn: Callable[[], T]) -> T:
    """``fn()``, with a full disk met anywhere (a write's ``ENOSPC``, SQLite's "database or
    disk is full") raised as the one-line :class:`~hyperfleet.errors.DiskFullError` (see
    :mod:`hyperfleet.platform.diskspace`)."""
    try:
        return fn()
    except HyperfleetError:
        raise
    except Exception as exc:
        from hyperfleet.platform.diskspace import disk_full_error, full_path

        where = full_path(exc)
        if where is None:
            raise
        raise disk_full_error(where) from exc
