"""A PBT member's MLflow record through exploits, on real stores (SQLite storage and MLflow):
each step once, the adopted state where the member jumps ahead, hyperparameters that follow.

The recorder is driven as the trial runtime drives it (reports, then a rewind after an
exploit decision), without a scheduler's say: which exploits happen is not what is tested.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml
from mlflow.tracking import MlflowClient

from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.recorder import RankZeroRecorder
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.tracking.client import open_client
from hyperfleet.platform.tracking.spool import Spool
from hyperfleet.spec.wire import TrialSpec, trial_dir
from tests.conftest import deep_update

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pbt_toy.yaml"


def test_a_member_logs_each_step_once_and_ends_as_storage_says(
    tmp_path: Path, mlflow_template: Path
) -> None:
    shutil.copy(mlflow_template, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    run_id = client.create_run(client.create_experiment("member")).info.run_id
    url = f"sqlite:///{tmp_path / 'hf.db'}"
    data = deep_update(yaml.safe_load(EXAMPLE.read_text()), {"storage": url,
                       "workdir": str(tmp_path / "runs")})  # fmt: skip
    cfg = parse_sweep(data)
    storage = Storage(url)
    storage.sweeps.create(cfg.name, cfg.model_dump(mode="json"))
    params = {"h0": 1.0, "h1": 0.0, "lr": 0.05}
    spec = TrialSpec(
        sweep=cfg.name, number=0, trial=cfg.trial, params=params, workdir=str(tmp_path / "runs"),
        trial_dir=str(trial_dir(tmp_path / "runs", cfg.name, 0)), storage=url,
        tracking_uri=uri, run_id=run_id, sweep_config=cfg.model_dump(mode="json"),
    )  # fmt: skip
    rec = RankZeroRecorder(spec)
    rec(4, {"Q": 0.1})
    rec(8, {"Q": 0.2})
    # exploit of a donor behind (its checkpoint of step 4): steps 4..8 are trained again
    storage.trials.upsert(cfg.name, 1, last_step=12, metrics={"Q": 0.5})
    explored = {"h0": 0.5, "h1": 0.8, "lr": 0.05}
    rec.rewind(4, explored, donor=1)
    rec(8, {"Q": 0.25})  # recorded in storage; MLflow already holds step 8
    rec(12, {"Q": 0.3})
    # exploit of a donor ahead, at its last step: the member holds the donor's state there
    storage.trials.upsert(cfg.name, 1, last_step=16, metrics={"Q": 0.9})
    rec.rewind(16, {"h0": 0.4, "h1": 1.0, "lr": 0.05}, donor=1)
    rec.finish("complete")  # the trial ends without waiting for MLflow: all in its spool
    assert client.get_metric_history(run_id, "Q") == []
    spool = Spool(Path(spec.trial_dir) / "mlflow")
    assert spool.ship(open_client(uri), run_id) > 0  # what the controller does at the end

    def curve(key: str) -> list[tuple[int, float]]:
        history = client.get_metric_history(run_id, key)
        return [(m.step, m.value) for m in sorted(history, key=lambda m: (m.timestamp, m.step))]

    assert curve("Q") == [(4, 0.1), (8, 0.2), (12, 0.3), (16, 0.9)]
    assert curve("hp/h1") == [(4, 0.0), (8, 0.0), (12, 0.8), (16, 1.0)]
    record = storage.trials.get(cfg.name, 0)
    assert record is not None and record.last_step == 16 and record.metrics["Q"] == 0.9
    assert record.params["h1"] == 1.0  # what the last hp/ point says
