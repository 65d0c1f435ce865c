"""The Devices page of a sweep served by two ``hyperfleet worker`` processes on one host: a lane
per worker and device (both workers' ``cpu:0`` slots, not one lane for two), a bar per lease,
and the workers as ``hf_workers`` stores them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from hyperfleet.platform.storage import Storage
from hyperfleet.testing.sweeps import minimal_sweep
from hyperfleet.testing.workers import start_worker, worker_command
from tests.dashboards.sweeps import APP, WORKLOAD, write_sweep
from tests.integration.cli import cli_env, invoke

pytestmark = pytest.mark.slow
PER_WORKER = 2


def _sweep(root: Path, mlflow_template: Path) -> Path:
    data = minimal_sweep(
        name="shared",
        budget={"trials": 2 * PER_WORKER},
        space={"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True}},
        trial={"workload": WORKLOAD, "eval_every": 2},
        workdir=str(root / "runs"),
    )
    return write_sweep(root, mlflow_template, data)


def test_devices_page_has_a_lane_per_worker_and_device(
    tmp_path: Path, mlflow_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = f"sqlite:///{tmp_path / 'hf.db'}"
    submitted = invoke("sweep", "submit", str(_sweep(tmp_path, mlflow_template)))
    assert submitted.exit_code == 0, submitted.output
    # each worker exits after its share, so both serve the sweep whichever starts first
    share = ["--max-trials", str(PER_WORKER), "--exit-when-idle", "60s"]
    cmd = worker_command(storage, *share, devices="cpu:1", verbose=False)
    workers = [start_worker(cmd, cwd=tmp_path, env=cli_env()) for _ in range(2)]
    try:
        outputs = [w.communicate(timeout=300)[0] for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    assert [w.returncode for w in workers] == [0, 0], outputs
    st = Storage.open_readonly(storage)
    leases = st.leases.all("shared")
    ids = {lease.worker for lease in leases}
    assert len(ids) == 2 and len(leases) == 2 * PER_WORKER, leases
    host = leases[0].host

    monkeypatch.setenv("HYPERFLEET_STORAGE", storage)
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.switch_page("views/devices.py").run()
    assert not at.exception, [e.value for e in at.exception]
    lanes = at.table[0].value
    expected = {f"{host} · worker {i.removeprefix(host + '-')} · cpu:0" for i in ids if i}
    assert set(lanes.index) == expected
    assert set(lanes["worker"]) == {lane.split(" · ")[1] for lane in expected}
    assert list(lanes["leases"]) == [PER_WORKER, PER_WORKER]
    timeline = next(e for e in at.get("plotly_chart") if e.proto.id.endswith("timeline"))
    bars = json.loads(timeline.proto.spec)["data"]
    assert sorted(y for d in bars for y in d["y"]) == sorted(
        f"{host} · worker {lease.worker.removeprefix(host + '-')} · cpu:0"
        for lease in leases
        if lease.worker
    )
    assert {m.label: m.value for m in at.metric}["workers"] == "2"
    registered = at.table[1].value
    assert set(registered.index) == ids
    assert list(registered["leases of this sweep"]) == [PER_WORKER, PER_WORKER]
