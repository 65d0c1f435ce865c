"""``hyperfleet sweep delete`` and ``hyperfleet.load(name).delete()``: a sweep removed whole,
so that its name is free (a ``sweep run`` of the same name starts afresh).

Three stores hold a sweep, and each part goes:

* **MLflow**: the sweep's run and its trials' runs, deleted as MLflow deletes runs (marked
  deleted, restorable until ``mlflow gc``; :mod:`~hyperfleet.platform.tracking.deletion`);
* **files**: its run directory ``<workdir>/<sweep>/`` (trial directories: checkpoints, logs,
  specs, spools), only when its marker names this sweep
  (:mod:`~hyperfleet.platform.storage.ownership`: a directory of another storage's sweep of
  the same name is kept), and its local checkpoint replica folder (named after its creation
  time, so its own). ``keep_files`` keeps both, the run directory moved aside to
  ``<workdir>/<sweep>.deleted-<creation time>`` so that the name is free. An object store
  replica is left as it is; the plan's lines name it;
* **storage**: every row naming it and its Optuna study
  (:mod:`~hyperfleet.platform.storage.removal`).

:func:`plan_deletion` reads what there is, writing nothing, and refuses a sweep that is
served right now (its trials running with live heartbeats, or a live worker started for it
alone): stop it first. :func:`delete_sweep` deletes, under the sweep's claim lock so that no
worker claims a trial of it meanwhile, after asking again who serves it. Storage goes last:
a deletion cut short leaves the sweep listed, and deleting it again finishes the work.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hyperfleet.errors import ConfigError, HyperfleetError
from hyperfleet.platform.clock import STALE_AFTER_S
from hyperfleet.platform.credentials import masked
from hyperfleet.platform.storage import Storage, SweepRecord
from hyperfleet.platform.storage.engine import sqlite_path
from hyperfleet.platform.storage.ownership import MARKER, absolute_uri, identity, local_store
from hyperfleet.platform.storage.paths import creation_stamp, replica_folder
from hyperfleet.platform.storage.removal import Serving
from hyperfleet.platform.storage.results import no_sweep
from hyperfleet.platform.tracking.deletion import delete_runs
from hyperfleet.platform.urls import local_tracking
from hyperfleet.spec.trial import replica_is_remote

__all__ = ["Deleted", "Deletion", "delete_sweep", "plan_deletion"]


@dataclass(frozen=True)
class Deletion:
    """What deleting sweep ``name`` removes (:func:`plan_deletion`)."""

    name: str
    storage: str
    created_at: float
    trials: int
    tracking_uri: str
    experiment_id: str | None
    parent_run_id: str | None
    run_ids: tuple[str, ...]
    run_dir: Path | None
    """The sweep's own run directory (its marker names this sweep); None when there is none."""
    replica: Path | None
    """The sweep's local checkpoint replica folder, when it has one on this host."""
    kept: tuple[str, ...] = ()
    """Lines naming what is not deleted and why (another sweep's directory, a remote replica)."""

    @property
    def aside(self) -> Path | None:
        """Where ``keep_files`` moves the run directory: ``<workdir>/<sweep>.deleted-<creation
        time>``, so that the name is free (a new sweep of the name would otherwise find the
        deleted one's marker, or its checkpoints, in ``<workdir>/<sweep>``)."""
        if self.run_dir is None:
            return None
        return self.run_dir.with_name(f"{self.name}.deleted-{creation_stamp(self.created_at)}")

    def lines(self, keep_files: bool = False) -> list[str]:
        """What goes, a line each, then what stays."""
        runs = len(self.run_ids) + (self.parent_run_id is not None)
        files = [p for p in (self.run_dir, self.replica) if p is not None]
        shown = [
            f"sweep {self.name!r} in {masked(self.storage)}: {self.trials} trial(s)",
            "  storage: its rows and its Optuna study",
            f"  MLflow: the sweep's run and its trials' runs ({runs} known) in "
            f"{masked(self.tracking_uri)}",
        ]
        if not keep_files:
            shown += [f"  files: {p}" for p in files]
        elif self.run_dir is not None:
            shown.append(f"  kept (--keep-files): {self.run_dir}, moved to {self.aside}")
        if keep_files and self.replica is not None:
            shown.append(f"  kept (--keep-files): {self.replica}")
        return shown + [f"  kept: {line}" for line in self.kept]


@dataclass(frozen=True)
class Deleted:
    """What :func:`delete_sweep` deleted."""

    name: str
    rows: int
    study: bool
    runs: int
    files: tuple[Path, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    def line(self) -> str:
        """``deleted sweep 'q': 12 rows, its Optuna study, 5 MLflow runs, 1 folder``."""
        parts = [f"{self.rows} rows", "its Optuna study" if self.study else "no Optuna study",
                 f"{self.runs} MLflow runs", f"{len(self.files)} folder(s)"]  # fmt: skip
        notes = "".join(f"; {n}" for n in self.notes)
        return f"deleted sweep {self.name!r}: {', '.join(parts)}{notes}; the name is free"


def _at(config: Mapping[str, Any], *keys: str) -> Any:
    """``config[k1][k2]...``; None where a section is missing (a config of another version)."""
    node: Any = config
    for key in keys:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


def served_refusal(name: str, serving: Serving) -> ConfigError:
    """The line refusing to delete a sweep that is served right now."""
    return ConfigError(
        f"sweep: {name!r} is being served now: {serving.describe()}; stop it first "
        f"(hyperfleet sweep stop {name}) or wait for it to end, then delete it"
    )


def plan_deletion(
    storage_url: str,
    name: str,
    tracking_uri: str | None = None,
    stale_after: float = STALE_AFTER_S,
) -> Deletion:
    """What deleting sweep ``name`` would remove; writes nothing. ``ConfigError`` for a name
    the storage does not hold (the closest it does) and for a sweep served right now."""
    st = Storage.open_readonly(storage_url)
    try:
        row = st.sweeps.get(name)
        if row is None:
            raise ConfigError(no_sweep(name, [r.name for r in st.sweeps.all()], masked(st.url)))
        serving = st.removal.serving(name, stale_after)
        if serving:
            raise served_refusal(name, serving)
        trials = st.trials.of(name)
    finally:
        st.close()
    run_ids = tuple(t.mlflow_run_id for t in trials if t.mlflow_run_id)
    return _plan(row, storage_url, len(trials), run_ids, tracking_uri)


def _plan(
    row: SweepRecord, storage_url: str, trials: int, run_ids: tuple[str, ...], uri: str | None
) -> Deletion:
    config = row.stored_config
    workdir = _at(config, "workdir")
    tracking = uri or _at(config, "tracking", "uri") or local_tracking(workdir or ".")
    kept: list[str] = []
    run_dir = None
    if workdir:
        run_dir = _own_dir(Path(workdir) / row.name, identity(row.name, row.created_at), kept)
    stores = [p for p in (sqlite_path(storage_url), local_store(tracking)) if p is not None]
    if run_dir is not None and any(p.resolve().is_relative_to(run_dir) for p in stores):
        kept.append(f"{run_dir} (it holds the storage or the MLflow store)")
        run_dir = None
    replica = _at(config, "trial", "checkpoint", "replica")
    folder = None
    if replica and replica_is_remote(replica):
        kept.append(f"the checkpoint replica under {masked(replica)} (remove it with the "
                    f"object store's own tools)")  # fmt: skip
    elif replica:
        found = replica_folder(replica, row.name, row.created_at)
        folder = found if found.is_dir() else None
    return Deletion(
        name=row.name, storage=storage_url, created_at=row.created_at, trials=trials,
        tracking_uri=absolute_uri(tracking), experiment_id=row.mlflow_experiment_id,
        parent_run_id=row.mlflow_parent_run_id, run_ids=run_ids, run_dir=run_dir,
        replica=folder, kept=tuple(kept),
    )  # fmt: skip


def _own_dir(directory: Path, mine: str, kept: list[str]) -> Path | None:
    """``directory`` when its marker names the sweep ``mine``; else None, and why in ``kept``
    when the directory is there."""
    directory = directory.resolve()
    if not directory.is_dir():
        return None
    try:
        marker = json.loads((directory / MARKER).read_text())
    except (OSError, ValueError):
        marker = None
    owner = marker.get("identity") if isinstance(marker, dict) else None
    if owner == mine:
        return directory
    why = f"marked as {owner}'s" if owner else f"without this sweep's {MARKER}"
    kept.append(f"{directory} ({why}: not this sweep's files)")
    return None


def delete_sweep(
    plan: Deletion, keep_files: bool = False, stale_after: float = STALE_AFTER_S
) -> Deleted:
    """Delete what ``plan`` names (see the module docstring); ``keep_files`` keeps the run
    directory and the replica folder. ``ConfigError`` when the sweep is served now or is no
    longer the one planned (deleted, or deleted and created again, meanwhile)."""
    st = Storage(plan.storage, create=False)
    try:
        with st.claim_lock(plan.name):
            row = st.sweeps.get(plan.name)
            if row is None or row.created_at != plan.created_at:
                raise ConfigError(
                    f"sweep: {plan.name!r} changed since it was read (deleted or created "
                    f"again meanwhile); run the deletion again"
                )
            serving = st.removal.serving(plan.name, stale_after)
            if serving:
                raise served_refusal(plan.name, serving)
            runs = delete_runs(
                plan.tracking_uri, plan.experiment_id, plan.parent_run_id, plan.run_ids
            )
            files, moved = _clear_files(plan, keep_files)
            removed = st.removal.remove(plan.name)
    finally:
        st.close()
    notes = [*moved, *(f"kept {line}" for line in plan.kept)]
    if runs.missing is not None:
        notes.append(f"MLflow store {runs.missing} is not on this host: its runs are left")
    rows = sum(removed.rows.values())
    return Deleted(plan.name, rows, removed.study, runs.deleted, files, tuple(notes))


def _clear_files(plan: Deletion, keep_files: bool) -> tuple[tuple[Path, ...], tuple[str, ...]]:
    """Remove the run directory and the replica folder (``keep_files``: move the run
    directory aside, :attr:`Deletion.aside`, and keep the replica folder where it is); the
    folders removed and a line per folder kept. One line (an error) when one cannot be."""
    gone: list[Path] = []
    kept: list[str] = []
    for folder in (plan.run_dir, plan.replica):
        if folder is None or not folder.is_dir():
            continue
        try:
            if not keep_files:
                shutil.rmtree(folder)
                gone.append(folder)
            elif folder == plan.run_dir:
                assert plan.aside is not None
                folder.rename(plan.aside)
                kept.append(f"kept {folder} as {plan.aside}")
            else:
                kept.append(f"kept {folder}")
        except OSError as exc:
            raise HyperfleetError(
                f"files: cannot remove or move {folder} ({exc.strerror or exc}); fix its "
                f"permissions and delete the sweep again (its storage rows are still there)"
            ) from None
    return tuple(gone), tuple(kept)
