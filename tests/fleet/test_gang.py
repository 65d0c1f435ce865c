"""A trial that spans hosts: two workers of two devices each run one charlm trial of four
processes (data 2 x pipeline 2) through torchrun's c10d rendezvous, and it trains exactly as
the same trial does as four processes of one host."""

from __future__ import annotations

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


def _losses(fleet: Fleet, run_id: str) -> dict[int, float]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{fleet.root / 'mlflow.db'}")
    history = client.get_metric_history(run_id, "loss")
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
    gangs = fleet.storage().gangs("lm-2node")
    assert len(gangs) == 1 and gangs[0].nodes == 2
    ids = {a.id(fleet), b.id(fleet)}
    assert set(gangs[0].members) == ids, "one agent on each worker"
    leases = fleet.storage().leases("lm-2node")
    assert {x.worker for x in leases} == ids and all(len(x.devices) == 2 for x in leases)
    assert c.id(fleet) not in ids

    got, want = _losses(fleet, two.mlflow_run_id or ""), _losses(fleet, one.mlflow_run_id or "")
    assert sorted(got) == sorted(want) and len(want) == 4, (sorted(got), sorted(want))
    worst = max(abs(got[s] - want[s]) for s in want)
    assert worst <= 1e-5, f"2-node loss differs from 1-host loss by {worst}"
