"""A trial whose nodes are a range (``nodes: {min: 1, max: 2}``) loses a node and goes on.

Two workers of one CPU slot each run one digits trial as a gang of two nodes. While the trial
holds at its report of step 20 (a checkpoint), the worker of its second node is killed
(SIGKILL: its torchrun agent and ranks go with it). The leader's agent meets again alone
(torchrun's elastic rendezvous, ``--nnodes 1:2``) and its rank continues from the checkpoint
at one rank: the trial completes in its first attempt, under its leader, with no retry, each
step logged once in its one MLflow run, and its sizes recorded as 2 ranks then 1.
"""

from __future__ import annotations

import signal

import pytest

from hyperfleet.testing.sweeps import digits_sweep
from tests.fleet.conftest import Fleet
from tests.fleet.test_workers import _mlflow_steps, held, release

pytestmark = [pytest.mark.slow, pytest.mark.long, pytest.mark.postgres]

SWEEP = digits_sweep(
    name="lose-a-node",
    scheduler={"type": "random", "seed": 0},
    budget={"trials": 1, "max_concurrent": 1},
    trial={
        "steps": 60,
        "eval_every": 10,
        "resources": {"devices": 2, "nodes": {"min": 1, "max": 2}, "gang_timeout": "300s"},
    },
)


def test_a_trial_that_loses_a_node_finishes_on_the_other_without_a_requeue(
    fleet: Fleet,
) -> None:
    fleet.submit(fleet.sweep(held(SWEEP, fleet)))
    common = ("--advertise-address", "127.0.0.1", "--exit-when-idle", "10s")
    a = fleet.start("a", "--devices", "cpu:1", "--sweep", "lose-a-node", *common)
    b = fleet.start("b", "--devices", "cpu:1", "--sweep", "lose-a-node", *common)
    ids = {a.id(fleet): a, b.id(fleet): b}

    def held_at_20() -> bool:
        trial = fleet.trials("lose-a-node").get(0)
        return trial is not None and trial.state == "RUNNING" and (trial.last_step or 0) >= 20

    fleet.wait(held_at_20, 600, "the trial held at its report of step 20")
    (gang,) = fleet.storage().gangs.of("lose-a-node")
    assert len(gang.members) == 2, gang.members
    leader, member = gang.members
    lost = ids[member]
    lost.proc.send_signal(signal.SIGKILL)  # the node's worker; its agent dies with it
    lost.proc.wait()
    fleet.workers.remove(lost)
    release(fleet)
    fleet.finish(timeout=600)

    (trial,) = fleet.trials("lose-a-node").values()
    assert trial.state == "COMPLETE", trial.error
    assert trial.last_step == 60
    assert trial.worker == leader, "it finished under its leader, not taken over"
    assert (trial.attempts, trial.retries) == (1, 0), "continued, not requeued or retried"
    assert trial.sizes is not None and [s for _, s in trial.sizes] == [2, 1], trial.sizes
    assert trial.sizes[1][0] > 20, "one rank from after the checkpoint it resumed from"
    steps = _mlflow_steps(fleet, trial.mlflow_run_id or "", "val_accuracy")
    assert sorted(steps) == [10, 20, 30, 40, 50, 60], steps
    log = (fleet.root / "runs" / "lose-a-node" / "trial-0000" / "log.txt").read_text()
    assert "node 1 of 1: ranks 0-0 of world size 1" in log, log[-3000:]
