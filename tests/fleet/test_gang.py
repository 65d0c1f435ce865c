"""A trial that spans hosts: two workers of two devices each run one charlm trial of four
processes (data 2 x pipeline 2) through torchrun's c10d rendezvous, and it trains exactly as
the same trial does as four processes of one host; a script trial of two nodes runs its
unchanged program as one process group across the two workers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import deep_update
from tests.fleet.conftest import Fleet

pytestmark = [pytest.mark.slow, pytest.mark.long, pytest.mark.postgres]

LM: dict[str, Any] = {
    "name": "lm-2node",
    "objective": {"metric": "val_loss", "mode": "min"},
    "scheduler": {"type": "random", "seed": 0},
    "budget": {"trials": 1, "max_concurrent": 1},
    "space": {"lr": {"type": "categorical", "choices": [0.004]}},
    "trial": {
        "workload": "charlm",
        "params": {"corpus_bytes": 120_000, "batch_size": 8, "seq_len": 32, "n_embd": 32,
                   "eval_batches": 1, "dropout": 0.0, "seed": 3},
        "steps": 12,
        "eval_every": 3,
        "resources": {"devices": 4, "nodes": 2, "gang_timeout": "300s"},
        "parallel": {"data": 2, "pipeline": 2, "microbatches": 2},
    },
}  # fmt: skip


def _losses(fleet: Fleet, run_id: str, metric: str = "loss") -> dict[int, float]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{fleet.root / 'mlflow.db'}")
    history = client.get_metric_history(run_id, metric)
    steps = [m.step for m in history]
    assert len(steps) == len(set(steps)), f"a step reported twice: {sorted(steps)}"
    return {m.step: m.value for m in history}


def test_a_two_node_trial_trains_as_one_host_of_four_processes(fleet: Fleet) -> None:
    one_host = deep_update(
        LM, {"name": "lm-1host", "trial": {"resources": {"devices": 4, "nodes": 1}}}
    )
    fleet.submit(fleet.sweep(LM, "two-nodes.yaml"))
    fleet.submit(fleet.sweep(one_host, "one-host.yaml"))
    common = ("--advertise-address", "127.0.0.1", "--exit-when-idle", "6s")
    a = fleet.start("a", "--devices", "cpu:2", "--sweep", "lm-2node", *common)
    b = fleet.start("b", "--devices", "cpu:2", "--sweep", "lm-2node", *common)
    fleet.finish(timeout=900)
    # The reference: the same trial as four processes of one worker, once the gang is done
    # (so the two runs do not share the machine's two cores).
    c = fleet.start("c", "--devices", "cpu:4", "--sweep", "lm-1host", *common)
    fleet.finish(timeout=900)

    two, = fleet.trials("lm-2node").values()  # fmt: skip
    one, = fleet.trials("lm-1host").values()  # fmt: skip
    assert two.state == "COMPLETE", two.error
    assert one.state == "COMPLETE", one.error
    assert two.params == one.params

    log = (fleet.root / "runs" / "lm-2node" / "trial-0000" / "log.txt").read_text()
    assert "node 1 of 2: ranks 0-1 of world size 4" in log, log[-3000:]
    assert "node 2 of 2: ranks 2-3 of world size 4" in log, log[-3000:]
    gangs = fleet.storage().gangs.of("lm-2node")
    assert len(gangs) == 1 and gangs[0].nodes == 2
    ids = {a.id(fleet), b.id(fleet)}
    assert set(gangs[0].members) == ids, "one agent on each worker"
    leases = fleet.storage().leases.all("lm-2node")
    assert {x.worker for x in leases} == ids and all(len(x.devices) == 2 for x in leases)
    assert c.id(fleet) not in ids

    got, want = _losses(fleet, two.mlflow_run_id or ""), _losses(fleet, one.mlflow_run_id or "")
    assert sorted(got) == sorted(want) and len(want) == 4, (sorted(got), sorted(want))
    worst = max(abs(got[s] - want[s]) for s in want)
    assert worst <= 1e-5, f"2-node loss differs from 1-host loss by {worst}"


def test_a_script_trial_of_two_nodes_runs_its_program_across_the_gang(fleet: Fleet) -> None:
    import hyperfleet

    program = Path(__file__).resolve().parents[1] / "launcher" / "programs" / "ddp.py"
    script = {
        "name": "script-2node",
        "objective": {"metric": "val_loss", "mode": "min"},
        "scheduler": {"type": "random", "seed": 0},
        "budget": {"trials": 1, "max_concurrent": 1},
        "space": {"x": {"type": "categorical", "choices": [0.5]}},
        "trial": {
            "command": ["python", str(program), "${args}", "--out", "${trial_dir}"],
            "steps": 3,
            "resources": {"devices": 2, "nodes": 2, "gang_timeout": "120s"},
        },
    }
    fleet.submit(fleet.sweep(script))
    common = ("--advertise-address", "127.0.0.1", "--exit-when-idle", "6s")
    a = fleet.start("a", "--devices", "cpu:1", "--sweep", "script-2node", *common)
    b = fleet.start("b", "--devices", "cpu:1", "--sweep", "script-2node", *common)
    fleet.finish(timeout=600)

    trial, = fleet.trials("script-2node").values()  # fmt: skip
    assert trial.state == "COMPLETE", trial.error
    assert hyperfleet.load("script-2node", storage=fleet.storage_url).best_value == 1.5
    assert trial.trial_dir is not None
    seen = [json.loads((Path(trial.trial_dir) / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [s["WORLD_SIZE"] for s in seen] == ["2", "2"], seen
    assert {s["GROUP_RANK"] for s in seen} == {"0", "1"}, "one rank on each node"
    assert {s["MLFLOW_RUN_ID"] for s in seen} == {trial.mlflow_run_id}
    (gang,) = fleet.storage().gangs.of("script-2node")
    assert set(gang.members) == {a.id(fleet), b.id(fleet)}, "one node on each worker"
    log = (Path(trial.trial_dir) / "log.txt").read_text()
    assert log.count("# hyperfleet script:") == 2, log[-3000:]
    # rank 0's reports, recorded by one node: each point once in the trial's MLflow run
    assert sorted(_losses(fleet, trial.mlflow_run_id or "", "val_loss").items()) == [
        (1, 3.5), (2, 2.0), (3, 1.5)
    ]  # fmt: skip
