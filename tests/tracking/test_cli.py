"""``hyperfleet mlflow``: the command that serves a sweep's stores, and the hint that names it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from hyperfleet.errors import ConfigError
from hyperfleet.platform.tracking.client import experiment_location
from hyperfleet.platform.tracking.server import experiment_url, ui_command, ui_hint
from hyperfleet.platform.urls import absolute
from tests.integration.cli import cli
from tests.tracking.server import free_port


def test_a_local_store_is_served_with_its_artifacts_beside_it(tmp_path: Path) -> None:
    db = tmp_path / "runs" / "mlflow.db"
    db.parent.mkdir()
    db.touch()
    cmd = ui_command(f"sqlite:///{db}", tmp_path / "runs", "127.0.0.1", 5123)
    assert cmd[1:4] == ["server", "--backend-store-uri", f"sqlite:///{db}"]
    assert cmd[cmd.index("--artifacts-destination") + 1] == str(db.parent / "mlartifacts")
    assert "--serve-artifacts" in cmd and cmd[cmd.index("--port") + 1] == "5123"
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    with pytest.raises(ConfigError, match="no MLflow store"):
        ui_command(f"sqlite:///{tmp_path / 'none.db'}", tmp_path, "127.0.0.1", 5000)


def test_artifact_locations_are_the_servers_or_beside_a_local_store(tmp_path: Path) -> None:
    assert experiment_location("http://mlflow:5000", tmp_path) is None  # the server decides
    local = experiment_location(f"sqlite:///{tmp_path / 'a' / 'mlflow.db'}", tmp_path / "w")
    assert local == (tmp_path / "a" / "mlartifacts").as_uri()


def test_the_hint_is_one_line_to_copy_from_any_directory() -> None:
    here = Path.cwd()
    assert ui_hint("hyperfleet", "sqlite:///h.db", "sqlite:///m.db", "sqlite:///m.db", "3") == (
        f"hyperfleet mlflow --storage sqlite:///{here / 'h.db'}"
    )
    given = ui_hint("hyperfleet", "sqlite:////a/h.db", "sqlite:///x.db", "sqlite:///m.db", "3", "s")
    assert given == (
        f"hyperfleet mlflow --storage sqlite:////a/h.db --sweep s --tracking-uri "
        f"sqlite:///{here / 'x.db'}"
    )
    runs = "http://h:5000/#/experiments/7/runs?workflowType=machine_learning"
    assert ui_hint("hf", "s", "http://h:5000/", "d", "7") == runs  # MLflow's training runs view
    assert experiment_url("http://h:5000", None) == "http://h:5000"
    assert absolute("postgresql://u@h/db") == "postgresql://u@h/db"


def test_a_storage_without_sweeps_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = cli("mlflow", "--storage", f"sqlite:///{tmp_path / 'nothing.db'}", timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and len(proc.stderr.strip().splitlines()) == 1


def test_an_unreachable_tracking_server_stops_a_sweep_before_anything_is_written(
    sweep_file: Callable[..., Path], tmp_path: Path
) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    path = sweep_file({"name": "no-mlflow", "tracking": {"uri": nobody}})
    proc = cli("sweep", "run", str(path), timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(
        f"error: tracking.uri: no MLflow server answers at {nobody} ("
    )
    assert errors[0].endswith("start it (mlflow server) or fix tracking.uri / --tracking-uri")
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "runs" / "hf.db").exists()  # nothing written to storage
