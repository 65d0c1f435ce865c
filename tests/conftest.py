"""Shared fixtures: a scratch working directory and sweep files built from a base mapping."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperfleet.testing.sweeps import DIGITS, deep_update, digits_sweep

# Three test processes share two cores with the trial processes they start: torch's and
# OpenBLAS's own thread pools in the test processes would only spin against them. Trial
# processes get their threads from their lease (OMP_NUM_THREADS), as in a real sweep.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Workers and ranks import torch._dynamo ahead for a first optimizer (trial_process.import_ahead):
# about 1.5 s of CPU each, which the suite's many short sweeps without an optimizer would pay
# for nothing. tests/launcher/test_import_ahead.py tests it; a test may set it back.
os.environ.setdefault("HYPERFLEET_IMPORT_AHEAD", "")

BASE_SWEEP: dict[str, Any] = digits_sweep(
    name="t",
    scheduler={"type": "tpe", "seed": 0},
    space={**DIGITS["space"], "hidden": {"type": "int", "low": 32, "high": 64}},
    trial={"steps": 100, "eval_every": 50, "resources": {"devices": 2}, "parallel": {"data": 2}},
)


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    """Run the test inside an empty directory (stores default to ./hyperfleet-runs)."""
    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(old)


@pytest.fixture(scope="session")
def mlflow_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty MLflow SQLite store with its schema migrated, made once per session.

    Creating a store runs MLflow's migrations (seconds); tests copy this file instead.
    """
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory, mlflow_template: Path) -> Iterator[Any]:
    """One real tracking server (``tests.tracking.server.MlflowServer``) for the session.

    Defined here, not imported into the modules that use it: each module a fixture is imported
    into holds a fixture of its own, so each would start a server of its own.
    """
    from tests.tracking.server import MlflowServer

    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"), mlflow_template)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def runs_dir(tmp_path: Path, mlflow_template: Path) -> Path:
    """``tmp_path/runs``, the stores' directory of a test's sweep, its MLflow store
    (``mlflow.db``) a copy of the session's migrated template."""
    import shutil

    runs = tmp_path / "runs"
    runs.mkdir(exist_ok=True)
    if not (runs / "mlflow.db").exists():
        shutil.copy(mlflow_template, runs / "mlflow.db")
    return runs


@pytest.fixture
def sweep_file(tmp_path: Path, runs_dir: Path) -> Callable[..., Path]:
    """``sweep_file(changes, name=...)``: the base sweep with ``changes`` merged in, as YAML.

    Its stores live under ``tmp_path/runs``; the MLflow store starts as a copy of the
    session's migrated template.
    """

    def make(changes: dict[str, Any] | None = None, filename: str = "sweep.yaml") -> Path:
        changes = dict(changes or {})
        space = changes.pop("space", None)
        data = deep_update(BASE_SWEEP, changes)
        if space is not None:
            data["space"] = space  # a given space replaces the base one
        data.setdefault("storage", f"sqlite:///{tmp_path / 'runs' / 'hf.db'}")
        # no model export (a torch process of seconds) unless a test asks for one
        data.setdefault(
            "tracking", {"uri": f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}", "log_model": False}
        )
        data.setdefault("workdir", str(tmp_path / "runs"))
        path = tmp_path / filename
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return make


# -- PostgreSQL ------------------------------------------------------------------------------


def _pg_bin() -> Path | None:
    from hyperfleet.platform.services.postgres import pg_bindir

    return pg_bindir()


def require_postgres() -> None:
    """Skip the test where PostgreSQL's binaries are not installed (fail it on CI, which
    installs them)."""
    if _pg_bin() is None:
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL binaries are missing; .ci/run installs Debian's postgresql")
        pytest.skip("PostgreSQL binaries not installed (apt-get install postgresql)")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def held_port() -> Iterator[int]:
    """A loopback port this test holds (listening, never answering), as a process that took
    a server's port between its choice and the server's bind would."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A real PostgreSQL server on loopback for this test session; yields its base URL.

    Uses ``HYPERFLEET_TEST_POSTGRES_URL`` when set; otherwise starts a throwaway cluster with
    the local ``initdb``/``pg_ctl`` (``hyperfleet.testing.postgres``; Debian's ``postgresql``
    package, installed by .ci/run).
    """
    from hyperfleet.testing.postgres import throwaway_server

    url = os.environ.get("HYPERFLEET_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    require_postgres()
    with throwaway_server() as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server: str) -> str:
    """A fresh, empty database on the session's PostgreSQL server."""
    from hyperfleet.testing.postgres import new_database

    return new_database(postgres_server)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Both storage backends: a SQLite file and a PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return request.getfixturevalue("postgres_url")


# -- S3 --------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """A real S3 API server on loopback for this test session (moto's server mode, in a
    thread of the test process); yields its endpoint URL."""
    from moto.server import ThreadedMotoServer

    from hyperfleet.platform.services.ports import free_port as free

    port = free()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def aws_env(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> None:
    """The standard AWS environment of a user of the S3 server at ``endpoint``: a fresh random
    key pair, a region, and none of the machine's own profiles or credentials."""
    import secrets

    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIA" + secrets.token_hex(8).upper())
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "sk" + secrets.token_hex(16))
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)  # none of the machine's own


@pytest.fixture
def s3_bucket(s3_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket on the session's S3 server, as ``s3://bucket``. The standard AWS
    environment names the server (``AWS_ENDPOINT_URL``) and a fresh random key pair (the
    secret key: ``os.environ["AWS_SECRET_ACCESS_KEY"]``, for tests that look for it), as a
    user's would; the processes the test starts inherit it."""
    import secrets

    from s3fs import S3FileSystem

    aws_env(monkeypatch, s3_server)
    S3FileSystem.clear_instance_cache()  # a cached client would keep an earlier test's keys
    bucket = f"hf-{secrets.token_hex(6)}"
    S3FileSystem().mkdir(bucket)
    return f"s3://{bucket}"


# -- parallel runs (pytest-xdist) ------------------------------------------------------------


def _worker_group(item: pytest.Item) -> str | None:
    """The group whose tests share one worker: those that share a costly fixture.

    Module-scoped fixtures (a trained model, a warm group, a browser) and the dashboard's
    session of real sweeps are made once per worker that needs them; keeping their tests in
    one worker makes them once, as a serial run does; so does the session's MLflow server
    (``tests.tracking.server``: two processes and ~7 s of CPU to start), and the one-node
    Slurm of ``tests/platform/elastic``. The network-namespace test uses fixed subnets, so two
    of it must not run at once.
    """
    if "filled" in item.fixturenames:
        return "dashboard-sweeps"
    if "mlflow_server" in item.fixturenames:
        return "mlflow-server"
    if "hosts" in item.fixturenames:  # tests/fleet/test_hosts.py's network namespaces
        return "network-namespaces"
    if "slurm_cluster" in item.fixturenames:  # one Slurm (three daemons) per session
        return "slurm"
    if "s3_server" in item.fixturenames:  # one S3 server (moto) per session
        return "s3-server"
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    if any(d and d[-1].scope == "module" for d in defs.values()):
        return item.nodeid.split("::", 1)[0]
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = _worker_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
