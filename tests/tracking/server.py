"""A real ``mlflow server`` for tests: SQLite backend, proxied artifacts, loopback, its own port.

:class:`MlflowServer` starts ``mlflow server --backend-store-uri sqlite:///... --serve-artifacts
--artifacts-destination ... --host 127.0.0.1 --port <free>`` as its own process group and waits
(bounded: ``STARTUP_S``) until ``/health`` answers from a socket of that group (not from another
server that took the port). A port another process took before the server bound it costs
another try (:func:`hyperfleet.platform.services.ports.start_on_free_port`); a server that does
not start raises with its log's last lines. ``stop`` ends that group (the server's workers
included) and ``start`` again serves the same store on the same port, as a restarted server
does. It runs without MLflow's job runners, as every server hyperfleet starts. Its database
starts as a copy of the session's migrated template, so a start runs no migration.

Fixtures: ``mlflow_server`` (one per test session, shared by tests that never stop it; defined
in ``tests/conftest.py``: a session fixture imported into several modules would be one fixture
per module, each starting a server) and ``mlflow_server_factory`` (servers of one test, stopped
at its end).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hyperfleet.platform.services.ports import free_port as free_port  # for the tracking tests
from hyperfleet.platform.services.ports import (
    listened_by,
    log_size,
    log_tail,
    start_on_free_port,
)
from hyperfleet.platform.services.processes import group_members
from hyperfleet.platform.tracking.server import mlflow_executable, server_env

STARTUP_S = 300.0  # a loaded 2-core machine has needed 110 s; an idle one needs ~10


class MlflowServer:
    """One tracking server over a store under ``root`` (see the module docstring)."""

    def __init__(self, root: Path, template: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.db = root / "mlflow.db"
        shutil.copy(template, self.db)
        self.artifacts = root / "artifacts"
        self.port = 0  # chosen at the first start
        self.log = root / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as reply:
                return bool(reply.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def start(self) -> None:
        """Serve; the first start chooses the port, a restart keeps it."""
        if self.port:
            self._start_at(self.port)
        else:
            start_on_free_port(self._start_at, self.log)

    def _start_at(self, port: int) -> None:
        self.port = port
        cmd = [
            mlflow_executable(),
            "server",
            "--backend-store-uri",
            f"sqlite:///{self.db}",
            "--serve-artifacts",
            "--artifacts-destination",
            str(self.artifacts),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            "1",
        ]
        since = log_size(self.log)
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=server_env()
            )
        deadline = time.monotonic() + STARTUP_S
        while not (self.healthy() and listened_by(port, group_members(self.proc.pid))):
            if self.proc.poll() is not None:
                self.proc = None
                raise RuntimeError(
                    f"mlflow server exited on port {port}: {log_tail(self.log, since=since)}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"mlflow server not healthy after {STARTUP_S:.0f} s: "
                    f"{log_tail(self.log, since=since)}"
                )
            time.sleep(0.2)  # polling readiness, bounded by the deadline

    def stop(self) -> None:
        """End the server's process group (a server going away, as an outage does)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        except ProcessLookupError:
            pass
        self.proc = None
        deadline = time.monotonic() + 30
        while self.healthy() and time.monotonic() < deadline:  # a worker still answering
            time.sleep(0.1)


@pytest.fixture
def mlflow_server_factory(
    tmp_path: Path, mlflow_template: Path
) -> Iterator[Callable[[], MlflowServer]]:
    """``make()`` -> a server of this test (not started); all are stopped at the end."""
    made: list[MlflowServer] = []

    def make() -> MlflowServer:
        server = MlflowServer(tmp_path / f"mlflow-{len(made)}", mlflow_template)
        made.append(server)
        return server

    try:
        yield make
    finally:
        for server in made:
            server.stop()
