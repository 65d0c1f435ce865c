"""Which sweep a run directory belongs to, and where a sweep's records go.

**Run directories.** A sweep's files (its trial directories: checkpoints, ``log.txt``,
``spec.json``, MLflow spools) live under ``<workdir>/<sweep>/``. The name alone does not say
which sweep: the same file run again with ``--storage`` naming another database is a new sweep
of the same name in the same directory, which would resume from the first one's checkpoints
and overwrite its logs. So the directory records its owner in a marker,
``<workdir>/<sweep>/.hyperfleet-sweep.json``: the sweep's **identity** in its storage, its
name and its creation time to the millisecond (the ``created_at`` column, set once when the
sweep is created; the replica folder of :func:`~hyperfleet.platform.storage.paths.replica_folder` is
named after the same stamp), and the storage URL with any password masked (only to name the
owner in messages: one database has many URLs).

:func:`check_owner` runs before a sweep writes anything (``sweep run``, ``sweep submit``): a
directory marked by another sweep, or an unmarked one holding trial directories while the
storage has no such sweep, is refused with one line (the CLI exits 2; no storage, MLflow run
or file is created). :func:`claim` runs when a sweep is opened (a controller or a worker),
under its claim lock: it writes the marker if there is none (adopting a directory made by an
older hyperfleet, whose sweep is in storage), atomically (a hard link: one of two racing
sweeps wins), or refuses when the marker names another sweep.

**Workload code.** A sweep's workload is ``trial.workload`` and, for a function shipped by
value, ``trial.code`` (its cloudpickle, :mod:`~hyperfleet.platform.sweeps.shipping`): both are
stored with the config, which a run of the same name replaces, and so is ``trial.code_hash``,
the fingerprint of a function's code (:func:`~hyperfleet.platform.sweeps.shipping.code_hash`:
the same code in any process, whatever file or line defined it). :func:`same_workload` compares
the fingerprints where both runs have one, else the pickles. :func:`check_same_code` refuses
a run whose workload differs from the stored one while a live worker of another process serves
the sweep (a ``sweep run`` or ``hyperfleet.run`` elsewhere): its trials would run the new
code and both callers get one sweep's mixed results. An ended or interrupted sweep may be
continued with changed code from the command line; ``hyperfleet.run`` asks for ``resume=True``
(:mod:`hyperfleet.platform.sweeps.replace`).

**Tracking store.** The MLflow store given at submit (``--tracking-uri``, ``tracking.uri`` or
the default beside the workdir) belongs to the sweep: :func:`owned_config` writes it into the
stored configuration, absolute (a relative SQLite path, like a relative workdir, would mean
another store from another directory), so every worker logs there whatever its own default.
:func:`check_store` refuses to open a continued sweep on a local store whose file is not
there: a host that does not see the sweep's store says so instead of creating a new one.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hyperfleet.errors import ConfigError, StorageError
from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.credentials import keep, masked
from hyperfleet.platform.storage.paths import creation_stamp
from hyperfleet.spec.states import SweepStatus

if TYPE_CHECKING:
    from hyperfleet.platform.storage import SweepRecord

MARKER = ".hyperfleet-sweep.json"

__all__ = [
    "MARKER",
    "check_owner",
    "check_same_code",
    "check_same_space",
    "check_same_store",
    "check_store",
    "claim",
    "code_id",
    "identity",
    "owned_config",
    "same_workload",
    "stored_sweep",
]


def identity(name: str, created_at: float) -> str:
    """A sweep's identity: ``<name>@<creation time, UTC, ms>``."""
    return f"{name}@{creation_stamp(created_at)}"


def run_dir(cfg: SweepConfig) -> Path:
    return (Path(cfg.workdir) / cfg.name).resolve()


def _read(directory: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((directory / MARKER).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # unreadable: owned by someone, not by this sweep
    return data if isinstance(data, dict) else {}


def _refusal(directory: Path, name: str, marker: dict[str, Any] | None) -> ConfigError:
    if marker is None:
        owner = f"trials of another sweep {name!r} (made before ownership markers)"
    else:
        where = marker.get("storage") or "another storage"
        owner = f"the files of sweep {marker.get('identity') or name} of {where}"
    return ConfigError(
        f"workdir: {directory} holds {owner}; give this sweep another workdir or another "
        f"name (or run it with the storage that holds it)"
    )


def stored_sweep(storage_url: str, name: str) -> SweepRecord | None:
    """Sweep ``name``'s row in the storage (None: not there, or no storage yet); read only,
    so nothing is created."""
    from hyperfleet.platform.storage import Storage

    try:
        st = Storage.open_readonly(storage_url)
    except StorageError:
        return None
    try:
        return st.sweeps.get(name)
    finally:
        st.close()


def check_owner(cfg: SweepConfig, row: Any) -> None:
    """``ConfigError`` if the sweep's run directory belongs to another sweep than ``row`` (the
    sweep as stored, None if new; see the module docstring); writes nothing."""
    directory = run_dir(cfg)
    if not directory.is_dir():
        return
    marker = _read(directory)
    if marker is None and not any(directory.glob("trial-*")):
        return
    mine = None if row is None else identity(cfg.name, row.created_at)
    if marker is None:
        if mine is None:  # an older hyperfleet's sweep, not the one of this storage
            raise _refusal(directory, cfg.name, None)
        return  # adopted when the sweep is opened
    if mine is None or marker.get("identity") != mine:
        raise _refusal(directory, cfg.name, marker)


def check_same_store(cfg: SweepConfig, row: SweepRecord | None) -> None:
    """``ConfigError`` when a continued sweep is given another tracking store than the one
    holding its MLflow runs (``cfg`` as :func:`owned_config` made it)."""
    if row is None or row.config is None:
        return
    stored, given = row.config.tracking.uri, cfg.tracking.uri
    if stored and row.mlflow_parent_run_id and given and absolute_uri(stored) != given:
        raise ConfigError(
            f"--tracking-uri: sweep {cfg.name!r} logs to {masked(stored)}, not {masked(given)}; "
            f"give --tracking-uri {masked(stored)} (its MLflow runs are there) or a new name"
        )


def check_same_space(cfg: SweepConfig, row: SweepRecord | None) -> None:
    """``ConfigError`` when the stored sweep ``row`` (None: a new one) has another search
    space than ``cfg``: a continued sweep keeps its space (its trials and its study's
    distributions are of that space)."""
    if row is not None and row.stored_config.get("space") != cfg.model_dump(mode="json")["space"]:
        raise ConfigError(
            f"space: differs from the stored sweep {cfg.name!r}; "
            f"a continued sweep keeps its space, so use a new name"
        )


def code_id(trial: Mapping[str, Any]) -> str:
    """A trial section's workload as messages name it: its name, and its code's fingerprint
    (or its pickle's sha256) when it has code."""
    workload, code, fingerprint = trial.get("workload"), trial.get("code"), trial.get("code_hash")
    if fingerprint:
        return f"{workload} (code {str(fingerprint)[:12]})"
    if code is None:
        return str(workload)
    import hashlib

    return f"{workload} (pickle sha256 {hashlib.sha256(code.encode()).hexdigest()[:12]})"


def same_workload(stored: Mapping[str, Any], given: Mapping[str, Any]) -> bool:
    """Whether two trial sections (as stored, as JSON) run the same workload: the same name,
    and the same code's fingerprint where both have one (``trial.code_hash``, set for a
    function given to ``hyperfleet.run``/``submit``), else the same pickle."""
    if stored.get("workload") != given.get("workload"):
        return False
    mine, theirs = stored.get("code_hash"), given.get("code_hash")
    if mine and theirs:
        return bool(mine == theirs)
    return stored.get("code") == given.get("code")


def check_same_code(cfg: SweepConfig, row: SweepRecord | None, storage_url: str) -> None:
    """``ConfigError`` when sweep ``cfg.name`` is being run by a live worker of another process
    with another workload (see the module docstring); reads only."""
    if row is None or row.status in (SweepStatus.DONE, SweepStatus.INTERRUPTED):
        return
    stored = dict(row.stored_config.get("trial") or {})
    given = cfg.trial.model_dump(mode="json")
    if same_workload(stored, given):
        return
    from hyperfleet.platform.clock import STALE_AFTER_S
    from hyperfleet.platform.storage import Storage

    st = Storage.open_readonly(storage_url)
    try:
        serving = [
            w for w in st.workers.live(STALE_AFTER_S) if w.sweeps is None or cfg.name in w.sweeps
        ]
    finally:
        st.close()
    if not serving:
        return
    worker = serving[0]
    raise ConfigError(
        f"workload: sweep {cfg.name!r} is being run by another process (worker {worker.id} on "
        f"{worker.host}, pid {worker.pid}) with {code_id(stored)}, not {code_id(given)}; "
        f"give this run another name, or wait for it to end (or run it with the same code "
        f"to join it)"
    )


def claim(cfg: SweepConfig, created_at: float, storage_url: str) -> None:
    """Mark the sweep's run directory as its own (see the module docstring); ``ConfigError``
    if another sweep marked it."""
    directory = run_dir(cfg)
    mine = identity(cfg.name, created_at)
    marker = _read(directory)
    if marker is None:
        data = {"identity": mine, "sweep": cfg.name, "created_at": created_at,
                "storage": masked(absolute_uri(storage_url))}  # fmt: skip
        marker = _write_new(directory, data)
    if marker.get("identity") != mine:
        raise _refusal(directory, cfg.name, marker)


def _write_new(directory: Path, data: dict[str, Any]) -> dict[str, Any]:
    """Write the marker unless one exists (a hard link never replaces a file); the marker
    that is there afterwards."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".marker-", dir=directory)
    except OSError as exc:  # e.g. a worker on a host without the submitter's path
        raise ConfigError(
            f"workdir: cannot create {directory} on this host ({exc.strerror}); give the "
            f"sweep a workdir every worker can write (the same path on every host)"
        ) from None
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
        with contextlib.suppress(FileExistsError):
            os.link(tmp, directory / MARKER)
    finally:
        os.unlink(tmp)
    return _read(directory) or {}


def local_store(uri: str) -> Path | None:
    """The file or folder of a local MLflow store (None: a server or a database server)."""
    from hyperfleet.platform.storage.engine import sqlite_path

    if uri.startswith("sqlite:"):
        return sqlite_path(uri)
    if uri.startswith("file:"):
        return Path(uri.removeprefix("file://").removeprefix("file:"))
    return Path(uri) if "://" not in uri else None


def absolute_uri(uri: str) -> str:
    """A local MLflow store's URI with an absolute path (others as they are)."""
    path = local_store(uri)
    if path is None or path.is_absolute():
        return uri
    if uri.startswith("sqlite:"):
        return f"sqlite:///{path.resolve()}"
    return path.resolve().as_uri() if uri.startswith("file:") else str(path.resolve())


def owned_config(cfg: SweepConfig, tracking_uri: str) -> SweepConfig:
    """``cfg`` as stored: its workdir absolute and its tracking URI the one given, absolute."""
    # the password stays in this process (credentials.keep), off the stored configuration
    tracking = cfg.tracking.model_copy(update={"uri": absolute_uri(keep(tracking_uri))})
    workdir = str(Path(cfg.workdir).resolve())
    return cfg.model_copy(update={"tracking": tracking, "workdir": workdir})


def check_store(name: str, uri: str, parent_run_id: str | None) -> None:
    """``ConfigError`` when sweep ``name`` already has its MLflow run (``parent_run_id``) and
    its local store ``uri`` is not on this host: opening it would create an empty one."""
    path = local_store(uri)
    if parent_run_id and path is not None and not path.exists():
        raise ConfigError(
            f"tracking.uri: sweep {name!r} logs to {uri}, which this host does not see "
            f"({path} is missing); make it reachable here (a shared path or an MLflow server)"
        )
