"""Curves and run links through an MLflow tracking server (``--tracking-uri http://…``): a
real ``mlflow server`` on a copy of the TPE sweep's MLflow store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.results import summarize
from tests.dashboards.sweeps import TPE, Filled
from tests.tracking.server import MlflowServer

pytestmark = pytest.mark.slow
APP = Path(__file__).resolve().parents[2] / "hyperfleet" / "dashboards" / "app.py"


@pytest.fixture
def mlflow_server(filled: Filled, tmp_path: Path) -> Iterator[str]:
    """``mlflow server`` on a copy of the TPE sweep's store; yields its URL once it serves."""
    server = MlflowServer(
        tmp_path / "mlflow", Path(filled.tracking[TPE].removeprefix("sqlite:///"))
    )
    server.start()
    try:
        yield server.uri
    finally:
        server.stop()


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
