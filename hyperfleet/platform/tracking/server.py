"""``hyperfleet mlflow``: the MLflow UI on the stores a sweep used, and the hint that names it.

Every link to a sweep opens its experiment's training runs table
(:func:`hyperfleet.platform.urls.mlflow_runs_link`), not MLflow 3's GenAI overview.

A sweep's tracking store is its ``tracking.uri``, else ``<workdir>/mlflow.db``. A tracking
server needs nothing started: the UI is the server's address. A local store is served by
``mlflow server`` with its artifacts folder beside it (``<store dir>/mlartifacts``, see
:mod:`.client`) as the proxied artifact destination, on loopback unless ``--host`` says
otherwise.

Every ``mlflow server`` hyperfleet starts runs without MLflow's job runners (the huey consumers
of its GenAI evaluation jobs, which sweeps never use): they are eight more processes that poll
all the time, about a sixth of a core while the server is idle. Setting
``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=true`` in the environment brings them back.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hyperfleet.errors import ConfigError
from hyperfleet.platform.credentials import masked, public
from hyperfleet.platform.tracking.client import artifact_root, is_server, sqlite_path
from hyperfleet.platform.urls import absolute, mlflow_runs_link


def mlflow_executable() -> str:
    """The ``mlflow`` script beside this interpreter (or on PATH)."""
    path = Path(sys.executable).parent / "mlflow"
    return str(path) if path.exists() else "mlflow"


def server_env() -> dict[str, str]:
    """The environment of an ``mlflow server`` hyperfleet starts: this one, with MLflow's job
    runners off unless ``MLFLOW_SERVER_ENABLE_JOB_EXECUTION`` says otherwise."""
    return {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **os.environ}


def ui_command(tracking_uri: str, workdir: str | Path, host: str, port: int) -> list[str]:
    """The ``mlflow server`` command that serves a local store and its artifacts."""
    db = sqlite_path(tracking_uri)
    if db is not None and not db.is_file():
        raise ConfigError(
            f"tracking.uri: no MLflow store at {db}; run a sweep first, or pass --tracking-uri"
        )
    cmd = [
        mlflow_executable(),
        "server",
        "--backend-store-uri",
        public(tracking_uri),  # its password: in the environment (credentials.libpq_env)
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    root = artifact_root(tracking_uri, Path(workdir))
    if root is not None:
        cmd += ["--serve-artifacts", "--artifacts-destination", str(root)]
    return cmd


def experiment_url(tracking_uri: str, experiment_id: str | None) -> str:
    """The experiment's training runs table on the MLflow UI at ``tracking_uri`` (a server,
    or the address ``hyperfleet mlflow`` serves a local store at)."""
    return mlflow_runs_link(tracking_uri, experiment_id)


def ui_hint(
    hyperfleet: str,
    storage_url: str,
    tracking_uri: str,
    derived_uri: str,
    experiment_id: str | None,
    sweep: str | None = None,
) -> str:
    """One line to open the sweep's runs in MLflow: the server's runs table, or the
    ``hyperfleet mlflow`` command (absolute paths, so it works from any directory; with
    ``--sweep`` when ``sweep`` is given) that serves it and prints the link."""
    if is_server(tracking_uri):
        return masked(experiment_url(tracking_uri, experiment_id))
    hint = f"{hyperfleet} mlflow --storage {masked(absolute(storage_url))}"
    if sweep is not None:
        hint += f" --sweep {sweep}"
    if tracking_uri != derived_uri:  # given on the command line: not in the stored sweep
        hint += f" --tracking-uri {masked(absolute(tracking_uri))}"
    return hint
