"""Deleting a sweep's MLflow runs: its run and every trial's nested run, as MLflow deletes
runs (``MlflowClient.delete_run``): each is marked deleted, out of the UI's and searches'
view, and restorable (``mlflow runs restore``) until ``mlflow gc`` purges it with its
artifacts. The experiment stays: another sweep of the same name (of another storage) may
log to it, and MLflow refuses to create runs in a deleted one.

The runs are those storage names (the sweep's run, each trial's run) and those MLflow holds
as the sweep run's children (a trial's run created while storage could not learn its id).
A run already deleted, or not in the store, is skipped, so deleting again finishes what an
interrupted deletion began. A local store whose file is not on this host is not opened (that
would create an empty one): nothing of it is deleted, and :func:`delete_runs` says so.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hyperfleet.errors import HyperfleetError
from hyperfleet.platform.credentials import mask_text, masked
from hyperfleet.platform.storage.ownership import local_store
from hyperfleet.platform.tracking.client import is_transient, open_client, unreachable
from hyperfleet.platform.tracking.spool import is_pending

PAGE = 1000  # runs asked for per search


@dataclass(frozen=True)
class RunsDeleted:
    """How many runs were deleted; ``missing``: the local store is not on this host."""

    deleted: int
    missing: Path | None = None


def delete_runs(
    uri: str, experiment_id: str | None, parent_id: str | None, run_ids: Iterable[str | None]
) -> RunsDeleted:
    """Delete the sweep's run ``parent_id``, its children in ``experiment_id`` and the runs
    ``run_ids`` (pending placeholders skipped) in the store at ``uri`` (module docstring)."""
    ids = [r for r in (parent_id, *run_ids) if r is not None and not is_pending(r)]
    if not ids:  # never opened in MLflow
        return RunsDeleted(0)
    store = local_store(uri)
    if store is not None and not store.exists():
        return RunsDeleted(0, store)
    try:
        client = open_client(uri)
        if experiment_id is not None and parent_id is not None:
            ids += _children(client, experiment_id, parent_id)
        return RunsDeleted(sum(_delete(client, run_id) for run_id in dict.fromkeys(ids)))
    except Exception as exc:
        if is_transient(exc):
            raise unreachable(uri, exc) from None
        code = getattr(exc, "error_code", None)
        if code is None:
            raise  # not MLflow's answer: a bug
        reason = mask_text((str(exc).strip().splitlines() or [""])[0][:200])
        raise HyperfleetError(
            f"tracking.uri: MLflow at {masked(uri)} refused to delete the sweep's runs "
            f"({code}: {reason}); give --tracking-uri a store that allows it"
        ) from None


def _children(client: Any, experiment_id: str, parent_id: str) -> list[str]:
    """The ids of the runs nested under ``parent_id``, every page of them."""
    found: list[str] = []
    token = None
    while True:
        page = client.search_runs(
            [experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{parent_id}'",
            max_results=PAGE, page_token=token,
        )  # fmt: skip
        found += [run.info.run_id for run in page]
        token = page.token
        if not token:
            return found


def _delete(client: Any, run_id: str) -> int:
    """1 when run ``run_id`` was deleted now; 0 when it is not there or deleted already."""
    from mlflow.exceptions import MlflowException

    try:
        run = client.get_run(run_id)
    except MlflowException as exc:
        if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
            return 0
        raise
    if run.info.lifecycle_stage == "deleted":
        return 0
    client.delete_run(run_id)
    return 1
