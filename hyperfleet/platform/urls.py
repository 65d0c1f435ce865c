"""Which storage URLs and MLflow tracking URIs the platform can use, checked before anything is
written.

A URL is checked by its scheme alone (no connection): SQLAlchemy's ``dialect+driver`` for the
storage, MLflow's store kinds for tracking. Only what the platform runs on is accepted: SQLite
files and PostgreSQL through psycopg (the driver installed with hyperfleet; psycopg2 where it is
installed) for storage; MLflow servers (``http(s)://``), SQLite files, PostgreSQL and local
folders (a path or ``file:``) for tracking. Anything else (``foo://``, async drivers, ``gopher://``)
is one line naming the option and the schemes accepted, instead of a traceback from deep inside
SQLAlchemy or MLflow after the working directory was made. Passwords are never echoed.

The defaults live here too: a sweep's files go under ``DEFAULT_WORKDIR`` unless its
``workdir`` says otherwise, its storage is ``<workdir>/hyperfleet.db`` (``local_storage``) and
its MLflow store ``<workdir>/mlflow.db`` (``local_tracking``) unless the sweep file or the
command line names others; ``DEFAULT_STORAGE`` is the storage commands read without a
``--storage``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from urllib.parse import quote, urlsplit

from hyperfleet.platform.credentials import masked

STORAGE_SCHEMES = "sqlite:///PATH, postgresql://USER@HOST/DB or postgresql+psycopg://…"
TRACKING_SCHEMES = (
    "http(s)://HOST:PORT (an MLflow server), sqlite:///PATH, postgresql://…, a folder or file:PATH"
)
_POSTGRES_DRIVERS = {None: "psycopg", "psycopg": "psycopg", "psycopg2": "psycopg2"}

DEFAULT_WORKDIR = "hyperfleet-runs"  # a sweep's ``workdir`` when its file names none
STORAGE_FILE = "hyperfleet.db"  # the default storage, a SQLite file in the workdir
TRACKING_FILE = "mlflow.db"  # the default MLflow store, a SQLite file in the workdir
MLFLOW_UI_PORT = 5000  # where ``mlflow ui`` (and ``hyperfleet mlflow ui``) serve by default
DASHBOARD_PORT = 8501  # where ``hyperfleet dashboard`` serves by default (Streamlit's own)


def local_storage(workdir: str | Path = DEFAULT_WORKDIR) -> str:
    """The storage URL of a sweep whose file names no ``storage``: SQLite in its workdir."""
    return f"sqlite:///{Path(workdir) / STORAGE_FILE}"


def local_tracking(workdir: str | Path = DEFAULT_WORKDIR) -> str:
    """The MLflow tracking URI of a sweep whose file names no ``tracking.uri``."""
    return f"sqlite:///{Path(workdir) / TRACKING_FILE}"


DEFAULT_STORAGE = local_storage()  # what commands read without --storage


def absolute(url: str) -> str:
    """``url`` with a relative SQLite file made absolute (``sqlite:///runs/hf.db`` ->
    ``sqlite:////home/me/runs/hf.db``): a hint printed with it works from any directory.
    Any other URL comes back as it is."""
    db = sqlite_file(url)
    if db is None or db.is_absolute():
        return url
    _, sep, query = url.partition("?")
    return f"sqlite:///{db.resolve()}{sep}{query}"


def _unencoded_password(url: str) -> str | None:
    """Why ``url``'s user part does not parse as written (an ``@``, ``/``, ``?`` or ``#`` in
    the password, which would make part of it the host or the database), or None. Names no
    part of the URL but its scheme: any of it may be the password."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest or rest.startswith("/"):  # no user part (sqlite:///PATH)
        return None
    cut = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    head, tail = rest[:cut], rest[cut:]
    at = head.find("@")
    if at >= 0 and "/" not in head[:at] and "@" not in head[at + 1 :]:
        return None  # user[:password]@host/db: parses as written
    if at < 0 and ("/" in head or "@" not in tail):
        return None  # no user part; an '@' in a query parameter
    return (
        f"the {scheme}:// URL does not parse: its user or password holds '@', '/', '?' or "
        f"'#'; percent-encode the password (urllib.parse.quote(password, safe=''))"
    )


def _database_problem(url: str) -> str | None:
    """Why SQLAlchemy URL ``url`` is not one the platform runs on (a reason), or None."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    if not url.isprintable():
        return f"{masked(url)!r} has a control character"
    unencoded = _unencoded_password(url)
    if unencoded is not None:
        return unencoded
    try:
        parsed = make_url(url)
    except ArgumentError:
        return f"not a database URL: {masked(url)!r}"
    backend, driver = parsed.get_backend_name(), parsed.drivername.partition("+")[2] or None
    if backend == "sqlite" and driver in (None, "pysqlite"):
        return None
    if backend == "postgresql" and driver in _POSTGRES_DRIVERS:
        module = _POSTGRES_DRIVERS[driver]
        if importlib.util.find_spec(module) is not None:
            return None
        return f"{parsed.drivername}:// needs {module}, which is not installed"
    return f"{parsed.drivername}:// is not supported"


def storage_problem(url: str) -> str | None:
    """Why ``url`` can't be the platform's storage (a line naming ``storage``), or None."""
    reason = _database_problem(url)
    if reason is None:
        return None
    return f"storage: {reason}; use {STORAGE_SCHEMES} (--storage or the sweep file's storage)"


def tracking_problem(uri: str) -> str | None:
    """Why ``uri`` can't be an MLflow tracking URI (a line naming ``tracking.uri``), or None."""
    scheme = urlsplit(uri).scheme.lower() if uri.isprintable() else "?"
    reason: str | None = f"{scheme}:// is not supported"
    if scheme == "?":
        reason = f"{masked(uri)!r} has a control character"
    elif scheme in ("", "file", "http", "https"):
        reason = None
    elif scheme == "sqlite":
        reason = None if uri.startswith("sqlite:///") else "sqlite needs sqlite:///PATH"
    elif scheme.partition("+")[0] == "postgresql":
        reason = _database_problem(uri)
    if reason is None:
        return None
    return (
        f"tracking.uri: {reason}; use {TRACKING_SCHEMES} (--tracking-uri or the sweep file's "
        f"tracking.uri)"
    )


# MLflow 3 opens an experiment on its GenAI overview (traces, latency, tokens) unless the page's
# ``workflowType`` query parameter asks for the model-training view: its router reads it on
# every page (the ``mlflow.experimentKind`` tag does not change the first view). Every link the
# platform prints to a sweep's runs carries it.
MLFLOW_RUNS_VIEW = "workflowType=machine_learning"


def mlflow_runs_link(ui: str, experiment_id: str | None) -> str:
    """The experiment's training runs table in the MLflow UI at ``ui``:
    ``http://127.0.0.1:5000/#/experiments/3/runs?workflowType=machine_learning`` (the UI's
    own address when the experiment is not known)."""
    base = ui.rstrip("/")
    return f"{base}/{mlflow_runs_anchor(experiment_id)}" if experiment_id else base


def mlflow_run_link(ui: str, experiment_id: str, run_id: str) -> str:
    """One run's page in the MLflow UI at ``ui``, in the model-training view:
    ``http://127.0.0.1:5000/#/experiments/3/runs/RUN?workflowType=machine_learning``."""
    experiment = quote(str(experiment_id))
    return f"{ui.rstrip('/')}/#/experiments/{experiment}/runs/{quote(run_id)}?{MLFLOW_RUNS_VIEW}"


def mlflow_runs_anchor(experiment_id: str) -> str:
    """The runs table as a link relative to the MLflow UI that shows it (a run's description
    links there from whichever address the UI is served at)."""
    return f"#/experiments/{quote(str(experiment_id))}/runs?{MLFLOW_RUNS_VIEW}"


def sqlite_file(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL (None: another scheme, or in memory), read without
    importing SQLAlchemy (what ``storage.engine.sqlite_path`` resolves)."""
    if not url.startswith("sqlite:///"):
        return None
    path = url.removeprefix("sqlite:///").partition("?")[0]
    return Path(path) if path and path != ":memory:" else None


def started_from(opened: str, stored: str) -> Path | None:
    """The directory a sweep was started from, when the storage it names (``stored``, e.g.
    ``sqlite:///hyperfleet-runs/hyperfleet.db``) is relative and ``opened`` is that file
    reached from elsewhere (``sqlite:////home/me/proj/hyperfleet-runs/hyperfleet.db`` ->
    ``/home/me/proj``); else None. A reader started in another directory finds the sweep's
    relative paths (workdir, logs, ``tracking.uri``) under it."""
    own, here = sqlite_file(stored), sqlite_file(opened)
    if own is None or here is None or own.is_absolute() or ".." in own.parts:
        return None
    here = here.resolve()
    if here.parts[-len(own.parts) :] != own.parts:
        return None
    return here.parents[len(own.parts) - 1]


def rebased(location: str, origin: Path | None) -> str:
    """``location`` (a path or a ``sqlite:///`` URL) under ``origin`` when it is relative."""
    if origin is None:
        return location
    db = sqlite_file(location)
    if db is not None:
        return location if db.is_absolute() else f"sqlite:///{origin / db}"
    if "://" in location or Path(location).is_absolute():
        return location
    return str(origin / location)
