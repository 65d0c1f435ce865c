"""``hyperfleet sweep stop``, ``sweep pause`` and ``sweep resume``: a stored sweep's lifecycle.

Each changes the sweep's status in its storage (``--storage``, or ``HYPERFLEET_STORAGE``) and
returns; the workers serving the sweep act on it within seconds
(:mod:`hyperfleet.platform.sweeps.lifecycle` says what each does). A sweep that is not there,
done, or not in a status the command applies to is refused with one line and exit 2, and
nothing changes. Registered on ``hyperfleet sweep`` (:mod:`.sweep`) when the CLI is built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer

from hyperfleet.platform.cli.common import _guard, out, storage_option
from hyperfleet.platform.cli.sweep import sweep_app
from hyperfleet.platform.credentials import keep
from hyperfleet.platform.urls import DEFAULT_STORAGE

NAME_HELP = "The stored sweep's name (hyperfleet sweep list shows them)."


def _apply(action: Callable[[str, str], object], name: str, storage: str | None) -> None:
    from hyperfleet.platform.sweeps.lifecycle import Changed

    url = keep(storage or DEFAULT_STORAGE)  # shown without its password
    changed = _guard(lambda: action(url, name))
    assert isinstance(changed, Changed)
    out.print(changed.line(url), markup=False, highlight=False, soft_wrap=True)


@sweep_app.command("stop")
def sweep_stop(
    name: Annotated[str, typer.Argument(help=NAME_HELP)],
    storage: Annotated[str | None, storage_option("Storage URL.")] = None,
) -> None:
    """Stop a sweep for good: every worker leaves it, its running trials end (FAIL, 'stopped';
    reports and checkpoints kept, not retried), MLflow ends its run KILLED."""
    from hyperfleet.platform.sweeps.lifecycle import stop

    _apply(stop, name, storage)


@sweep_app.command("pause")
def sweep_pause(
    name: Annotated[str, typer.Argument(help=NAME_HELP)],
    storage: Annotated[str | None, storage_option("Storage URL.")] = None,
) -> None:
    """Pause a sweep: workers stop claiming its trials; its running trials go back to the
    queue, to continue from their checkpoints after ``sweep resume``."""
    from hyperfleet.platform.sweeps.lifecycle import pause

    _apply(pause, name, storage)


@sweep_app.command("resume")
def sweep_resume(
    name: Annotated[str, typer.Argument(help=NAME_HELP)],
    storage: Annotated[str | None, storage_option("Storage URL.")] = None,
) -> None:
    """Resume a paused sweep: workers claim its trials again until its budget is spent."""
    from hyperfleet.platform.sweeps.lifecycle import resume

    _apply(resume, name, storage)
