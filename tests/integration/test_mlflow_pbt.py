"""A PBT sweep's member runs agree with themselves, against a real ``mlflow server``.

The toy problem of the PBT paper (examples/pbt_toy.yaml) with a population of 4 time-sharing
2 slots (in-process members, so that members pause, exploit and resume often). For every
member's run:

* each step is in its metric history once, in order (an exploit from a donor behind does not
  log the re-trained steps again);
* its ``final/Q`` is its last logged ``Q``;
* its last ``hp/`` values are its ``hyperfleet.pbt.params`` tag;
* the lineage artifact on the sweep's run names each exploit's member and donor runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.population import SqlPopulationStore
from tests.conftest import deep_update
from tests.tracking.readback import (
    assert_unique_steps,
    children,
    download_json,
    history,
    run_sweep,
)
from tests.tracking.server import MlflowServer

pytestmark = [pytest.mark.slow, pytest.mark.long]  # PBT's runs against a tracking server
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pbt_toy.yaml"


def test_pbt_member_runs_agree(tmp_path: Path, mlflow_server: MlflowServer) -> None:
    data = deep_update(yaml.safe_load(EXAMPLE.read_text()), {
        "name": "pbt-agree",
        "scheduler": {"population": 4, "perturbation_interval": 8, "initial": [
            {"h0": 1.0, "h1": 0.0}, {"h0": 0.0, "h1": 1.0},
            {"h0": 0.5, "h1": 0.0}, {"h0": 0.0, "h1": 0.5}]},
        "budget": {"max_concurrent": 2},
        "trial": {"steps": 64, "eval_every": 4, "resources": {"devices": 0}},
        "storage": f"sqlite:///{tmp_path / 'hf.db'}",
        "tracking": {"uri": mlflow_server.uri, "experiment": "pbt-agree"},
        "workdir": str(tmp_path / "runs"),
    })  # fmt: skip
    path = tmp_path / "pbt.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    result, _ = run_sweep(path)
    assert result["state_counts"]["COMPLETE"] == 4

    client = MlflowClient(mlflow_server.uri)
    exp_id, parent_id = result["mlflow"]["experiment_id"], result["mlflow"]["parent_run_id"]
    members = children(client, exp_id, parent_id)
    store = SqlPopulationStore(Storage(f"sqlite:///{tmp_path / 'hf.db'}", create=False).engine)
    state = store.members("pbt-agree")
    events = store.lineage("pbt-agree")
    assert sorted(members) == sorted(state) == [0, 1, 2, 3]
    assert any(e.kind == "exploit" for e in events), "PBT never exploited"
    for number, run in members.items():
        assert run.info.run_name == f"trial-{number:04d}"
        assert_unique_steps(client, run)
        q = history(client, run.info.run_id, "Q")
        assert q[-1][0] == 64 and run.data.metrics["final/Q"] == pytest.approx(q[-1][1])
        tagged = json.loads(run.data.tags["hyperfleet.pbt.params"])
        assert tagged == state[number].params
        for key, value in tagged.items():
            last = history(client, run.info.run_id, f"hp/{key}")[-1][1]
            assert last == pytest.approx(value), (number, key, last, value)

    lineage = download_json(client, parent_id, "pbt/lineage.json", tmp_path / "dl")
    run_ids = {n: r.info.run_id for n, r in members.items()}
    exploits = [e for e in lineage if e["kind"] == "exploit"]
    assert len(lineage) == len(events) and exploits
    for e in exploits:
        assert e["member_run_id"] == run_ids[e["member"]]
        assert e["donor_run_id"] == run_ids[e["donor"]]
