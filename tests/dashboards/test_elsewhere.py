"""A sweep whose file names relative paths (its workdir, storage and MLflow store under
``runs/``), opened by a dashboard started in another directory: its curves and its trials'
logs are still found, under the directory the sweep was started from."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.sweeps.run import SweepRunner
from hyperfleet.platform.urls import rebased, started_from
from hyperfleet.testing.sweeps import minimal_sweep
from tests.dashboards.sweeps import APP

pytestmark = pytest.mark.slow


def test_where_a_sweep_started_is_read_from_its_storage() -> None:
    opened, stored = "sqlite:////home/me/proj/runs/hf.db", "sqlite:///runs/hf.db"
    assert started_from(opened, stored) == Path("/home/me/proj")
    assert started_from(opened, "sqlite:////elsewhere/hf.db") is None
    assert started_from(opened, "sqlite:///other/hf.db") is None
    home = Path("/home/me/proj")
    assert rebased("runs/s/trial-0000/log.txt", home) == "/home/me/proj/runs/s/trial-0000/log.txt"
    assert rebased("sqlite:///runs/mlflow.db", home) == "sqlite:////home/me/proj/runs/mlflow.db"
    assert rebased("http://mlflow:5000", home) == "http://mlflow:5000"


def test_curves_and_logs_from_another_directory(
    tmp_path: Path, mlflow_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    (project / "runs").mkdir(parents=True)
    shutil.copy(mlflow_template, project / "runs" / "mlflow.db")
    monkeypatch.chdir(project)
    data = minimal_sweep(name="here", workdir="runs", storage="sqlite:///runs/hf.db")
    cfg = parse_sweep({**data, "tracking": {"uri": "sqlite:///runs/mlflow.db"}})
    SweepRunner(cfg, str(cfg.storage), str(cfg.tracking.uri)).run()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("HYPERFLEET_STORAGE", f"sqlite:///{project / 'runs' / 'hf.db'}")
    monkeypatch.delenv("HYPERFLEET_TRACKING_URI", raising=False)
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.session_state["sweep"] = "here"
    at.switch_page("views/sweep.py").run()
    assert not at.exception, [e.value for e in at.exception]
    charts = {e.proto.id.split("-", 2)[2]: json.loads(e.proto.spec) for e in at.get("plotly_chart")}
    assert len(charts["curves"]["data"]) == 2, "the trials' curves, from runs/mlflow.db"
    assert any(e.label.startswith(f"log tail ({project / 'runs'}") for e in at.expander)
    assert not any("not on this host" in c.value for c in at.caption)
    assert list(elsewhere.iterdir()) == [], "nothing made in the dashboard's own directory"
