"""What every ``hyperfleet`` command shares: the consoles and the one-line error guard.

Every user error is one line on stderr and exit status 2 (3 for a storage outage; ``--debug``
shows the traceback).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar

import typer
from rich.console import Console

from hyperfleet.errors import ConfigError, HyperfleetError

out = Console()
err = Console(stderr=True)
T = TypeVar("T")
_state = {"debug": False}

HELP_MARKUP: Literal["markdown"] = "markdown"
"""How ``--help`` reads docstrings: as Markdown, so the ``double backticks`` of the project's
docstrings show as code rather than as literal backticks."""


def _no_type_on_flags() -> None:
    """Leave a flag's type out of ``--help``: typer's rich help shows every option's type
    (``<str>``), a flag's as ``<bool>``, as if it took a value; a flag takes none."""
    from typer.core import TyperOption

    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None or getattr(shown, "flags_untyped", False):
        return  # a typer without the type column, or already done

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        return None if self.is_flag else shown(self, ctx)

    display_type_rich.flags_untyped = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign,assignment]


_no_type_on_flags()


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
