"""``hyperfleet sweep delete NAME``: a sweep's storage rows, trial directories and MLflow runs
removed, after a confirmation (what goes is listed first), so that its name is free again
(:mod:`hyperfleet.platform.sweeps.delete`). A sweep that workers serve right now is refused
with nothing changed: stop it first."""

from __future__ import annotations

from typing import Annotated

import typer

from hyperfleet.platform.cli.common import _guard, err, out, storage_option, tracking_option
from hyperfleet.platform.urls import DEFAULT_STORAGE


def sweep_delete(
    name: str,
    storage: Annotated[str, storage_option("Storage URL.")] = DEFAULT_STORAGE,
    tracking_uri: Annotated[
        str | None, tracking_option("MLflow tracking URI (default: the sweep's own).")
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Delete without asking.")] = False,
    keep_files: Annotated[
        bool,
        typer.Option("--keep-files", help="Keep the trial directories and checkpoints."),
    ] = False,
) -> None:
    """Delete a sweep: its storage rows and Optuna study, its trial directories and
    checkpoints, and its MLflow runs (restorable until ``mlflow gc``); its name is free
    afterwards. Refused while workers serve it (``sweep stop`` it first)."""
    from hyperfleet.platform.sweeps.delete import delete_sweep, plan_deletion
    from hyperfleet.platform.sweeps.preflight import check_urls

    _guard(lambda: check_urls(storage, tracking_uri))
    plan = _guard(lambda: plan_deletion(storage, name, tracking_uri))
    for line in plan.lines(keep_files):
        out.print(line, markup=False, highlight=False, soft_wrap=True)
    if not yes and not _confirmed(f"Delete sweep {name!r}?"):
        err.print("nothing deleted", markup=False, highlight=False)
        raise typer.Exit(1)
    done = _guard(lambda: delete_sweep(plan, keep_files=keep_files))
    out.print(done.line(), markup=False, highlight=False, soft_wrap=True)


def _confirmed(question: str) -> bool:
    """The user's answer (no by default; no input at all, as in a pipe, is a no)."""
    try:
        return typer.confirm(question, default=False)
    except typer.Abort:
        return False
