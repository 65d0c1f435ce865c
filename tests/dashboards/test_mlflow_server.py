"""Curves and run links through an MLflow tracking server (``--tracking-uri http://…``): a
real ``mlflow server`` on a copy of the TPE sweep's MLflow store."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from hyperfleet.platform.results import summarize
from hyperfleet.platform.storage import Storage
from tests.dashboards.sweeps import TPE, Filled

pytestmark = pytest.mark.slow
APP = Path(__file__).resolve().parents[2] / "hyperfleet" / "dashboards" / "app.py"
START_TIMEOUT_S = 180


@pytest.fixture
def mlflow_server(filled: Filled, tmp_path: Path) -> Iterator[str]:
    """``mlflow server`` on a copy of the TPE sweep's store; yields its URL once it serves."""
    store = tmp_path / "mlflow.db"
    shutil.copy(filled.tracking[TPE].removeprefix("sqlite:///"), store)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mlflow = Path(sys.executable).parent / "mlflow"
    proc = subprocess.Popen([str(mlflow), "server", "--host", "127.0.0.1", "--port", str(port),
                             "--backend-store-uri", f"sqlite:///{store}", "--workers", "1"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)  # fmt: skip
    watchdog = threading.Timer(START_TIMEOUT_S, proc.kill)
    watchdog.start()
    seen = []
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if f"running on http://127.0.0.1:{port}" in line:
            break
    watchdog.cancel()
    assert proc.poll() is None, "".join(seen[-20:])
    threading.Thread(target=lambda: [None for _ in proc.stdout or []], daemon=True).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:  # the server and its uvicorn worker and job runner, which it does not stop itself
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_curves_and_links_from_an_mlflow_server(
    filled: Filled, mlflow_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYPERFLEET_STORAGE", filled.storage)
    monkeypatch.setenv("HYPERFLEET_TRACKING_URI", mlflow_server)
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.session_state["sweep"] = TPE
    at.switch_page("views/sweep.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.warning, [w.value for w in at.warning]
    charts = {e.proto.id.split("-", 2)[2]: json.loads(e.proto.spec) for e in at.get("plotly_chart")}
    best = summarize(Storage.open_readonly(filled.storage), TPE).best()
    assert best is not None
    drawn = {d["name"]: d for d in charts["curves"]["data"]}
    assert drawn[f"trial {best.number} ★"]["x"][-1] == best.last_step
    links = at.dataframe[0].value["mlflow"]
    assert all(link.startswith(f"{mlflow_server}/#/experiments/") for link in links)
