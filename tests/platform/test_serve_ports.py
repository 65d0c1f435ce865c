"""``hyperfleet mlflow`` and ``hyperfleet dashboard`` on a port another process holds: a port
given with ``--port`` is refused in one line naming it and the fix, exit 2, before a URL is
printed; without ``--port``, a taken default port is replaced by a free one, and the command
says which. Each test holds a listening socket on loopback."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hyperfleet.platform.urls import MLFLOW_UI_PORT
from hyperfleet.testing.sweeps import minimal_sweep
from tests.integration.cli import cli, cli_env

DASHBOARD_PORT = 8501  # Streamlit's, hyperfleet dashboard's default


@contextlib.contextmanager
def listening(port: int = 0) -> Iterator[int]:
    """A socket listening on ``127.0.0.1:port`` (0: a free port) while the block runs; its
    port. A port another process already listens on is held by that one: taken either way."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
        except OSError:
            if port == 0:
                raise
        yield port or int(s.getsockname()[1])


@pytest.fixture
def stored(tmp_path: Path, mlflow_template: Path) -> str:
    """A storage holding one sweep whose MLflow store is a local SQLite file."""
    from hyperfleet.platform.config import parse_sweep
    from hyperfleet.platform.storage import Storage

    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(mlflow_template, runs / "mlflow.db")
    url = f"sqlite:///{runs / 'hf.db'}"
    cfg = parse_sweep(minimal_sweep(
        name="served", workdir=str(runs), storage=url,
        tracking={"uri": f"sqlite:///{runs / 'mlflow.db'}"},
    ))  # fmt: skip
    storage = Storage(url)
    try:
        storage.sweeps.create("served", cfg.model_dump(mode="json"))
    finally:
        storage.close()
    return url


def _refused(port: int) -> list[str]:
    return [
        f"error: --port: 127.0.0.1:{port} is in use by another process; give another --port "
        f"(or leave --port out to serve on a free one)"
    ]


def test_a_busy_port_given_to_mlflow_is_refused(stored: str) -> None:
    with listening() as port:
        proc = cli("mlflow", "--storage", stored, "--port", str(port), timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == _refused(port)
    assert "MLflow UI" not in proc.stdout + proc.stderr, "no link to what holds the port"


def test_a_busy_port_given_to_the_dashboard_is_refused(stored: str) -> None:
    with listening() as port:
        proc = cli("dashboard", "--storage", stored, "--port", str(port), timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == _refused(port)


def _first_lines(args: list[str], until: str, timeout: float = 60.0) -> list[str]:
    """The stderr lines of ``hyperfleet ARGS`` up to the one starting with ``until``; the
    command (by then the server it became) is stopped after, with its process group."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "hyperfleet.platform", *args], stderr=subprocess.PIPE, text=True,
        stdout=subprocess.DEVNULL, env=cli_env(), start_new_session=True,
    )  # fmt: skip
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        assert proc.stderr is not None
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
            if line.startswith(until):
                return lines
        raise AssertionError(f"no line starting {until!r}: {lines}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


@pytest.mark.slow  # two CLI processes that become servers
def test_a_taken_default_port_is_replaced_by_a_free_one_and_said(stored: str) -> None:
    with listening(MLFLOW_UI_PORT):
        lines = _first_lines(["mlflow", "--storage", stored], "MLflow UI: ")
    note, link = lines[-2:]
    assert note.startswith(f"port {MLFLOW_UI_PORT} is in use on 127.0.0.1; serving on ")
    chosen = int(note.split("serving on ")[1].split()[0])
    assert chosen != MLFLOW_UI_PORT
    assert note.endswith("(--port to choose)")
    assert re.match(rf"MLflow UI: http://127\.0\.0\.1:{chosen}\b", link), link

    with listening(DASHBOARD_PORT):
        lines = _first_lines(["dashboard", "--storage", stored], "dashboard: ")
    note, link = lines[-2:]
    chosen = int(note.split("serving on ")[1].split()[0])
    assert note.startswith(f"port {DASHBOARD_PORT} is in use on 127.0.0.1; serving on ")
    assert link.startswith(f"dashboard: http://127.0.0.1:{chosen} ") and chosen != DASHBOARD_PORT


def test_the_port_to_serve() -> None:
    from hyperfleet.platform.services.ports import port_to_serve

    with listening() as held:
        port, note = port_to_serve("127.0.0.1", None, held)
        assert port != held and note is not None and f"serving on {port}" in note
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # the one chosen is free
    free, note = port_to_serve("127.0.0.1", held, MLFLOW_UI_PORT)
    assert (free, note) == (held, None), "a free port given is served as given"
