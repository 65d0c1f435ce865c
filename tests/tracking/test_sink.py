"""The trial's sink on a real MLflow store: reports batched off the training thread, spooled
while the tracking server is unreachable, sent once when it is back; system metrics."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from hyperfleet.platform.tracking import MetricSink
from hyperfleet.platform.tracking.client import is_transient, open_client
from hyperfleet.platform.tracking.spool import Spool
from tests.tracking.server import MlflowServer, free_port

KEYS = [f"m{i:02d}" for i in range(20)]


@pytest.fixture
def store(tmp_path: Path, mlflow_template: Path) -> tuple[str, MlflowClient, str]:
    """A real (SQLite) MLflow store with one run: (uri, client, run id)."""
    shutil.copy(mlflow_template, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("sink"))
    return uri, client, run.info.run_id


def steps_of(client: MlflowClient, run_id: str, key: str) -> list[int]:
    history = client.get_metric_history(run_id, key)
    return [m.step for m in sorted(history, key=lambda m: (m.timestamp, m.step))]


def test_reports_arrive_once_in_order(store: tuple[str, MlflowClient, str], tmp_path: Path) -> None:
    uri, client, run_id = store
    sink = MetricSink(uri, run_id, tmp_path / "spool", flush_every_s=0.05, ship_every_s=0.05)
    for step in range(1, 61):
        sink.log_metrics(step, {k: step + i / 100 for i, k in enumerate(KEYS)})
    sink.log_metrics(61, {"m00": float("nan")})  # dropped: MLflow cannot chart it
    sink.close()
    for key in KEYS:
        assert steps_of(client, run_id, key) == list(range(1, 61))
    assert sink.sent == 60 * 20 and Spool(tmp_path / "spool").unsent_bytes() == 0


def test_an_unreachable_server_loses_nothing(
    store: tuple[str, MlflowClient, str], tmp_path: Path
) -> None:
    uri, client, run_id = store
    nobody = f"http://127.0.0.1:{free_port()}"  # no server listens there
    sink = MetricSink(nobody, run_id, tmp_path / "spool", flush_every_s=0.05, ship_every_s=0.05)
    for step in range(1, 11):
        sink.log_metrics(step, {"loss": 1.0 / step})
    sink.close()  # one last attempt fails; the trial does not wait
    spool = Spool(tmp_path / "spool")
    assert sink.sent == 0 and spool.unsent_bytes() > 0 and spool.through() == 10
    # what the controller (or `hyperfleet mlflow sync`) does once MLflow answers
    assert spool.ship(open_client(uri), run_id) == 10
    assert spool.ship(open_client(uri), run_id) == 0
    assert steps_of(client, run_id, "loss") == list(range(1, 11))


def test_a_trial_under_a_controller_ends_without_waiting_for_mlflow(
    store: tuple[str, MlflowClient, str], tmp_path: Path
) -> None:
    uri, client, run_id = store
    sink = MetricSink(uri, run_id, tmp_path / "spool", flush_every_s=60, ship_every_s=60)
    for step in range(1, 6):
        sink.log_metrics(step, {"loss": 1.0 / step})
    sink.close(ship=False)  # the last records go to disk, not to MLflow
    spool = Spool(tmp_path / "spool")
    assert sink.sent == 0 and steps_of(client, run_id, "loss") == []
    assert spool.through() == 5 and spool.unsent_bytes() > 0
    assert spool.ship(open_client(uri), run_id) == 5  # the controller, ending the run
    assert steps_of(client, run_id, "loss") == [1, 2, 3, 4, 5]


def test_a_pending_run_is_found_once_the_controller_created_it(
    store: tuple[str, MlflowClient, str], tmp_path: Path
) -> None:
    uri, client, run_id = store
    sink = MetricSink(uri, "pending:4", tmp_path / "spool", flush_every_s=0.05, ship_every_s=0.05)
    sink.log_metrics(1, {"loss": 1.0})
    assert not sink.flush()  # no run yet: kept
    Spool(tmp_path / "spool").publish_run_id(run_id)  # the controller, when MLflow is back
    sink.log_metrics(2, {"loss": 0.5})
    sink.close()
    assert steps_of(client, run_id, "loss") == [1, 2]


def test_system_metrics_and_device_tags(
    store: tuple[str, MlflowClient, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, client, run_id = store
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    sink = MetricSink(
        uri, run_id, tmp_path / "spool", flush_every_s=0.05, ship_every_s=0.05, system_metrics=True
    )
    sink.log_metrics(1, {"loss": 1.0})
    sink.close()  # a short trial still gets one sample
    data = client.get_run(run_id).data
    assert "system/cpu_utilization_percentage" in data.metrics
    assert "system/system_memory_usage_megabytes" in data.metrics
    assert data.tags["hyperfleet.devices"] == "cpu" and data.tags["hyperfleet.host"]
    resumed = MetricSink(
        uri, run_id, tmp_path / "spool", flush_every_s=0.05, ship_every_s=0.05, system_metrics=True
    )
    resumed.close()  # a resumed trial continues the steps of its system metrics
    assert len(set(steps_of(client, run_id, "system/cpu_utilization_percentage"))) == 2


def test_host_metrics_have_mlflows_keys_and_a_short_trial_never_imports_mlflow(
    tmp_path: Path,
) -> None:
    """The host's figures are read with psutil under the keys of MLflow's own collectors,
    and a trial that ends before its sink's first shipment never imports MLflow (the
    controller ships its spool): checked in a fresh interpreter, as a trial process is."""
    from mlflow.system_metrics.metrics.cpu_monitor import CPUMonitor
    from mlflow.system_metrics.metrics.disk_monitor import DiskMonitor
    from mlflow.system_metrics.metrics.network_monitor import NetworkMonitor

    from hyperfleet.platform.tracking.system import HostMonitor

    theirs: set[str] = set()
    for monitor in (CPUMonitor(), DiskMonitor(), NetworkMonitor()):
        monitor.collect_metrics()
        theirs |= set(monitor.aggregate_metrics())
    ours = HostMonitor()
    ours.collect_metrics()
    assert set(ours.aggregate_metrics()) == theirs

    code = f"""
import sys
from hyperfleet.platform.tracking import MetricSink
sink = MetricSink("sqlite:///{tmp_path / "none.db"}", "pending:1", "{tmp_path / "spool"}",
                  system_metrics=True)
sink.log_metrics(1, {{"loss": 1.0}})
sink.close(ship=False)
assert "mlflow" not in sys.modules, "a short trial imported MLflow"

"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    spooled = (tmp_path / "spool" / "spool.jsonl").read_text()
    assert "system/cpu_utilization_percentage" in spooled and '"loss"' in spooled


def test_points_reach_a_server_through_its_rest_api(
    mlflow_server: MlflowServer,
    tmp_path: Path,
) -> None:
    uri = mlflow_server.uri
    client = MlflowClient(uri)
    run_id = client.create_run(client.create_experiment(f"sink-{tmp_path.name}")).info.run_id
    sink = MetricSink(uri, run_id, tmp_path / "spool", flush_every_s=0.05, ship_every_s=0.05)
    sink.set_tags({"hyperfleet.host": "h"})
    for step in range(1, 31):
        sink.log_metrics(step, {k: step + i / 7 for i, k in enumerate(KEYS)})
    sink.close()
    for i, key in enumerate(KEYS):  # each point once, with the value and step reported
        history = sorted(client.get_metric_history(run_id, key), key=lambda m: m.timestamp)
        assert [(m.step, m.value) for m in history] == [(s, s + i / 7) for s in range(1, 31)]
    assert client.get_run(run_id).data.tags["hyperfleet.host"] == "h"
    with pytest.raises(MlflowException) as rejected:
        open_client(uri).log_points("0" * 32, [("loss", 1.0, 1, 1)], {})
    assert not is_transient(rejected.value)  # no such run: skipped by a spool, not retried
