"""What every ``hyperfleet`` command shares: the consoles and the one-line error guard.

Every user error is one line on stderr and exit status 2 (3 for a storage outage; ``--debug``
shows the traceback).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.segment import Segments
from rich.table import Table

from hyperfleet.errors import ConfigError, HyperfleetError

if TYPE_CHECKING:
    from hyperfleet.platform.config import SweepConfig
    from hyperfleet.platform.config.overrides import BudgetOverride

out = Console()
err = Console(stderr=True)
T = TypeVar("T")
_state = {"debug": False, "program": False}

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


STORAGE_ENV = "HYPERFLEET_STORAGE"
TRACKING_ENV = "HYPERFLEET_TRACKING_URI"


#: ``--trials`` and ``--timeout`` of ``sweep run`` and ``sweep submit``: the budget of this run
#: in place of the file's (:mod:`hyperfleet.platform.config.overrides`)
TrialsOverride = Annotated[
    str | None, typer.Option("--trials", help="budget.trials for this run (stored with the sweep).")
]
TimeoutOverride = Annotated[
    str | None,
    typer.Option(
        "--timeout", help="budget.timeout for this run: 90s, 30m, 2h (stored with the sweep)."
    ),
]


def storage_option(help: str) -> Any:
    """A command's ``--storage``: read from ``HYPERFLEET_STORAGE`` when not given (what
    ``stack.env`` exports), which ``--help`` says."""
    return typer.Option(help=help, envvar=STORAGE_ENV, show_envvar=True)


def tracking_option(help: str) -> Any:
    """A command's ``--tracking-uri``: read from ``HYPERFLEET_TRACKING_URI`` when not given."""
    return typer.Option(help=help, envvar=TRACKING_ENV, show_envvar=True)


WIDE_HELP = "One line per row however wide (as in a pipe); a terminal's table wraps instead."


def print_table(table: Table, wide: bool = False, console: Console | None = None) -> None:
    """Print ``table`` without cutting a cell: in a terminal a long name folds onto more lines
    of its cell; in a pipe (or with ``wide``) every row is one line, however wide."""
    console = console or out
    for column in table.columns:
        column.overflow = "fold"
    if wide or not console.is_terminal:
        width = Measurement.get(console, console.options.update_width(1 << 16), table).maximum
        # rendered at its own width (print would cap it at the console's) and written unwrapped
        options = console.options.update_width(width)
        for line in console.render_lines(table, options, new_lines=True):
            console.print(Segments(line), soft_wrap=True)
    else:
        console.print(table)


def load_file(path: str | Path, override: BudgetOverride | None = None) -> SweepConfig:
    """The sweep file at ``path``, with ``override``'s budget values when given
    (:mod:`~hyperfleet.platform.config.overrides`); when the ``hyperfleet`` program runs
    (not a test's ``CliRunner``), its directory goes on the workload's import path first
    (:func:`hyperfleet.spec.workloads.add_import_path`), as the current directory did when
    the program started."""
    from hyperfleet.platform.config import load_sweep, read_yaml
    from hyperfleet.platform.config.overrides import parse_with
    from hyperfleet.spec.workloads import add_import_path

    if _state["program"]:
        add_import_path(Path(path).parent)
    if override:
        return parse_with(read_yaml(path), override)
    return load_sweep(path)
