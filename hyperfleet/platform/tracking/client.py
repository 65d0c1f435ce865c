"""Opening MLflow: a client per tracking URI, what counts as an outage, where artifacts live.

**Clients.** Every MLflow call of the platform goes through an explicit ``MlflowClient`` on an
explicit URI (never the fluent API's global state). For a tracking *server* (``http(s)://``)
the client's own retries are shortened (unless the environment sets them): MLflow's default
retries a refused connection for minutes inside one call, which would hold a controller or a
sink thread hostage during an outage; hyperfleet retries itself, with the data safe on disk
(:mod:`.spool`, :mod:`.outbox`).

**Transient or permanent.** A failed write is retried later unless MLflow answered that the
request itself is wrong (an invalid value, a run that does not exist): retrying those would
block everything queued behind them forever, so they are logged and dropped.

**Artifact locations.** A tracking server decides where artifacts go: experiments are created
without a location, so the server's default applies (``mlflow-artifacts:/`` with
``--serve-artifacts``, proxied through the server to its ``--artifacts-destination``) and no
client ever sees, or writes, a path of its own machine. A local store (``sqlite:///DIR/x.db``)
has no server to proxy through, and an ``mlflow-artifacts:`` location cannot be read with a
client on a SQLite URI; so its artifacts live beside it, in ``DIR/mlartifacts``: one folder
holds the store and its artifacts (``hyperfleet mlflow`` serves both). Other direct database
URIs (PostgreSQL without a server) use the sweep's ``workdir/mlartifacts``. To share runs
between machines, use a server.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hyperfleet.errors import ConfigError, HyperfleetError
from hyperfleet.platform.credentials import mask_text, masked, reveal
from hyperfleet.platform.tracking.seed import seed_store

logger = logging.getLogger(__name__)

Point = tuple[str, float, int, int]  # key, value, timestamp (ms), step

#: the MLflow client's own HTTP retries, shortened for a server (the environment wins)
HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
}

#: MLflow error codes that say the request itself is wrong: retrying cannot help
PERMANENT_CODES = frozenset(
    {
        "INVALID_PARAMETER_VALUE",
        "RESOURCE_ALREADY_EXISTS",
        "RESOURCE_DOES_NOT_EXIST",
        "INVALID_STATE",
        "BAD_REQUEST",
        "PERMISSION_DENIED",
        "UNAUTHENTICATED",
        "ENDPOINT_NOT_FOUND",
        "FEATURE_DISABLED",
    }
)


class TrackingUnavailableError(HyperfleetError):
    """The tracking store cannot be reached when a sweep starts (its message names the fix)."""


#: held while a thread imports MLflow: two threads importing it at once can meet a partially
#: initialised module (a trial's sink and its system metrics each import it off the main thread)
MLFLOW_IMPORT = threading.Lock()


#: the longest wait between two tries while MLflow is unreachable (trial sinks and the
#: controller's outbox): MLflow's writes resume within this long of its return
RETRY_S = 10.0
#: how long a sweep that ends during an outage waits for MLflow before it exits
WAIT_S = 120.0


def env_seconds(name: str, default: float) -> float:
    """A positive number of seconds from the environment variable ``name`` (unset: ``default``)."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ConfigError(
            f"{name}: expected a number of seconds above 0, got {raw!r}; unset it for the "
            f"default ({default:g})"
        )
    return value


def retry_s() -> float:
    """``HYPERFLEET_MLFLOW_RETRY_S``: the longest wait between tries during an outage."""
    return env_seconds("HYPERFLEET_MLFLOW_RETRY_S", RETRY_S)


def check_env() -> tuple[float, float]:
    """``(HYPERFLEET_MLFLOW_WAIT_S, HYPERFLEET_MLFLOW_RETRY_S)``; ConfigError for a bad one."""
    return env_seconds("HYPERFLEET_MLFLOW_WAIT_S", WAIT_S), retry_s()


def is_server(uri: str) -> bool:
    """True for a tracking server (``http://``, ``https://``), False for a local store."""
    return uri.startswith(("http://", "https://"))


def open_client(uri: str) -> Any:
    """An ``MlflowClient`` on ``uri`` (see the module docstring for a server's retries), with
    :func:`log_points` as a method. A password kept for ``uri`` is put back here, in memory
    only (:mod:`hyperfleet.platform.credentials`)."""
    uri = reveal(uri)
    if is_server(uri):
        for key, value in HTTP_DEFAULTS.items():
            os.environ.setdefault(key, value)
        # one line per retry of every call during an outage says nothing the sink's and the
        # outbox's own warnings (one per outage) do not
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    with MLFLOW_IMPORT:
        from mlflow.tracking import MlflowClient
    store = sqlite_path(uri)
    if store is not None:
        seed_store(store)  # a new local store: a copy of a migrated one, not MLflow's migrations

    class Client(MlflowClient):  # type: ignore[misc]
        def log_points(self, run_id: str, points: Sequence[Point], tags: Mapping[str, str]) -> None:
            log_points(self, uri, run_id, points, tags)

    return Client(tracking_uri=uri)


LOG_BATCH = "/api/2.0/mlflow/runs/log-batch"


def log_points(
    client: Any, uri: str, run_id: str, points: Sequence[Point], tags: Mapping[str, str]
) -> None:
    """One ``log_batch`` of plain ``(key, value, timestamp, step)`` points (at most 1000) and
    tags. To a server the request is sent as MLflow's REST API defines it, built here: MLflow's
    client spends about 20 times the CPU on the same request (entities, protobuf messages,
    indented JSON parsed back; ``benchmarks/bench_tracking.py``), which a trial's process would
    pay for every point. The same HTTP layer and credentials as MLflow's client are used, and
    its errors are MLflow's. A local store goes through the client."""
    if not is_server(uri):
        from mlflow.entities import Metric, RunTag

        metrics = [Metric(k, v, ts, s) for k, v, ts, s in points]
        client.log_batch(run_id, metrics=metrics, tags=[RunTag(k, v) for k, v in tags.items()])
        return
    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request, verify_rest_response

    body = {
        "run_id": run_id,
        "metrics": [{"key": k, "value": v, "timestamp": ts, "step": s} for k, v, ts, s in points],
        "tags": [{"key": k, "value": v} for k, v in tags.items()],
    }
    response = http_request(get_default_host_creds(uri), LOG_BATCH, "POST", json=body)
    verify_rest_response(response, LOG_BATCH)


def is_transient(exc: BaseException) -> bool:
    """Whether a failed MLflow call may succeed later (an outage, a locked database). A
    PostgreSQL backend that refuses the login (a wrong password, an unknown role) will refuse
    it again: not an outage."""
    from mlflow.exceptions import MlflowException

    from hyperfleet.platform.storage.retry import login_refused

    if login_refused(exc) is not None:
        return False
    if isinstance(exc, MlflowException):
        return exc.error_code not in PERMANENT_CODES
    if isinstance(exc, (LookupError, TypeError, AttributeError, AssertionError, NameError)):
        return False  # a bug, not an outage: retrying cannot help
    return isinstance(exc, Exception)


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (None for any other URI)."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri.removeprefix("sqlite:///").split("?", 1)[0])


def use_wal(uri: str) -> str | None:
    """Put a local MLflow store (a SQLite file) in SQLite's WAL journal mode, which the file
    keeps; the mode it is in afterwards (None: not a SQLite file). MLflow leaves SQLite in its
    default rollback-journal mode, where every commit syncs the disk several times: a trial's
    run costs about ten MLflow writes, and WAL halves their time (one sync per commit), with
    readers (``mlflow ui``, the dashboard) no longer blocking writers. As for the platform's
    own SQLite database, every process using the file must be on one host (WAL needs shared
    memory), which a local store already assumes; a server is for sharing runs. The sweep's
    end folds the log back into the file (:func:`checkpoint`)."""
    return _pragma(uri, "journal_mode=WAL")


_SYNC_NORMAL: set[str] = set()  # local stores whose connections sync at checkpoints only


def sync_at_checkpoints(uri: str) -> None:
    """Connections that this process opens from now on to a local MLflow store (a SQLite
    file) run with ``synchronous=NORMAL``, the setting SQLite recommends with WAL and the one
    the platform's own database uses: a commit no longer waits for the disk (a trial's run
    is about ten commits, each a disk sync otherwise); the file stays consistent through any
    crash, and only a power loss can take back the last commits, which ``hyperfleet mlflow
    sync`` writes again from storage and the trials' spools. Call before opening a client."""
    path = sqlite_path(uri)
    if path is None:
        return
    if not _SYNC_NORMAL:
        from sqlalchemy import event
        from sqlalchemy.engine import Engine

        event.listen(Engine, "connect", _sync_normal)
    _SYNC_NORMAL.add(str(path.resolve()))


def _sync_normal(dbapi_conn: Any, _record: Any) -> None:
    if not isinstance(dbapi_conn, sqlite3.Connection):
        return
    files = {row[2] for row in dbapi_conn.execute("PRAGMA database_list") if row[1] == "main"}
    if files & _SYNC_NORMAL:
        dbapi_conn.execute("PRAGMA synchronous=NORMAL")


def checkpoint(uri: str) -> None:
    """Fold a local store's WAL log into its file and empty the log, so that the ``.db`` file
    alone holds every run again (copied, backed up or opened by an older tool) once a sweep's
    writes are done. Best effort: a reader in the middle of a read leaves part for later."""
    _pragma(uri, "wal_checkpoint(TRUNCATE)")


def _pragma(uri: str, pragma: str) -> str | None:
    path = sqlite_path(uri)
    if path is None or not path.is_file():
        return None
    try:
        con = sqlite3.connect(path, timeout=5)
        try:
            return str(con.execute(f"PRAGMA {pragma}").fetchone()[0])
        finally:
            con.close()
    except sqlite3.Error:  # locked by a writer: the next sweep tries again
        logger.debug("PRAGMA %s on %s failed", pragma, path, exc_info=True)
        return None


def artifact_root(uri: str, workdir: Path | None = None) -> Path | None:
    """Where a local store's artifacts live (None: the server or MLflow decides)."""
    if is_server(uri) or uri.startswith("file:"):
        return None
    db = sqlite_path(uri)
    if db is not None:
        return db.resolve().parent / "mlartifacts"
    return None if workdir is None else workdir.resolve() / "mlartifacts"


def experiment_location(uri: str, workdir: Path | None = None) -> str | None:
    """The ``artifact_location`` of a new experiment on ``uri`` (module docstring)."""
    root = artifact_root(uri, workdir)
    return None if root is None else root.as_uri()


def unreachable(uri: str, exc: BaseException) -> TrackingUnavailableError:
    """The one-line error for a tracking store that cannot be opened."""
    text = str(exc)
    if "Connection refused" in text:
        reason = "connection refused"
    elif "timed out" in text or "Timeout" in text:
        reason = "no answer in time"
    else:
        reason = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
        reason = mask_text(reason[:200] + ("..." if len(reason) > 200 else ""))
    fix = "start the server" if is_server(uri) else "check the path"
    return TrackingUnavailableError(
        f"tracking.uri: cannot open MLflow at {masked(uri)} ({reason}); {fix} or fix tracking.uri"
    )


def log_batches(
    client: Any,
    run_id: str,
    *,
    params: Mapping[str, str] | None = None,
    tags: Mapping[str, str] | None = None,
    metrics: list[Any] | None = None,
) -> None:
    """``log_batch`` within MLflow's limits (100 params, 100 tags, 1000 metrics per call)."""
    from mlflow.entities import Param, RunTag

    items_p = [Param(k, v) for k, v in (params or {}).items()]
    items_t = [RunTag(k, v) for k, v in (tags or {}).items()]
    items_m = list(metrics or [])
    while items_p or items_t or items_m:
        client.log_batch(run_id, params=items_p[:100], tags=items_t[:100], metrics=items_m[:1000])
        items_p, items_t, items_m = items_p[100:], items_t[100:], items_m[1000:]
