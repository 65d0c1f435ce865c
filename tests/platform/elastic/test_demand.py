"""The elastic pool's decision, without a cluster: queued trials against live and pending
workers, never more than ``max_workers`` jobs, start failures backed off exponentially."""

from __future__ import annotations

from typing import Any

import pytest

from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.elastic import demand
from hyperfleet.platform.storage.records import TrialRecord, WorkerRecord
from hyperfleet.spec.states import TrialState, WorkerState
from hyperfleet.testing.sweeps import minimal_sweep


def trial(number: int, state: TrialState) -> TrialRecord:
    return TrialRecord(
        sweep="s", number=number, params={}, state=state, outcome=None, last_step=None,
        metrics={}, error=None, attempts=1, started_at=None, heartbeat_at=None, ended_at=None,
        host=None, pid=None, trial_dir=None, log_path=None, mlflow_run_id=None,
    )  # fmt: skip


def sweep(**overrides: Any) -> Any:
    return parse_sweep(minimal_sweep(name="s", **overrides))


def test_queued_work_is_what_could_run_at_once() -> None:
    cfg = sweep(budget={"trials": 8, "max_concurrent": 2})
    assert demand.sweep_demand(cfg, []).wanted == 2  # none suggested yet: 8 to come
    done = [trial(i, TrialState.COMPLETE) for i in range(7)]
    assert demand.sweep_demand(cfg, [*done, trial(7, TrialState.RUNNING)]).wanted == 1
    assert demand.sweep_demand(cfg, [*done, trial(7, TrialState.COMPLETE)]).wanted == 0
    waiting = [trial(i, TrialState.WAITING) for i in range(8)]
    assert demand.sweep_demand(cfg, waiting).wanted == 2
    unbounded = sweep(budget={"trials": None, "max_concurrent": 3, "timeout": "1h"})
    assert demand.sweep_demand(unbounded, done).wanted == 3


def test_workers_follow_device_needs_and_leave_out_what_cannot_fit() -> None:
    small = demand.SweepDemand("a", 0, wanted=4, nodes=1, per_node=0)
    wide = demand.SweepDemand("b", 5, wanted=2, nodes=2, per_node=2)
    assert demand.workers_wanted([small], None) == (4, [])  # unknown size: a trial each
    assert demand.workers_wanted([small], 4) == (1, [])  # four in-process slots
    assert demand.workers_wanted([small, wide], 2) == (2 + 4, [])  # 2 trials x 2 nodes
    total, unfit = demand.workers_wanted([small, wide], 1)
    assert total == 4 and len(unfit) == 1
    assert "sweep b" in unfit[0] and "--devices" in unfit[0]


@pytest.mark.parametrize(
    ("wanted", "alive", "others", "least", "most", "submit"),
    [
        (8, 0, 0, 0, 2, 2),  # from zero: never more than max
        (8, 2, 0, 0, 2, 0),  # full
        (1, 0, 0, 0, 2, 1),
        (2, 1, 1, 0, 4, 0),  # a worker started by hand counts
        (0, 0, 0, 1, 2, 1),  # min_workers kept up with nothing queued
        (0, 1, 0, 0, 2, 0),  # queue empty: none submitted, none cancelled
    ],
)
def test_jobs_to_submit(wanted: int, alive: int, others: int, least: int, most: int,
                        submit: int) -> None:  # fmt: skip
    assert demand.to_submit(wanted, alive, others, least, most) == submit


def job_row(job: str, at: float, state: WorkerState, host: str = "") -> WorkerRecord:
    return WorkerRecord(
        id=f"{host or 'slurm'}-{job}", host=host, pid=0, pool="default", devices=[],
        address=None, sweeps=None, started_at=at, heartbeat_at=at + 1, state=state, job_id=job,
    )  # fmt: skip


def test_start_failures_back_off_exponentially_and_reset_on_a_start() -> None:
    started = [job_row("1", 0, WorkerState.STOPPED), job_row("1", 5, WorkerState.STOPPED, "n1")]
    failed = [job_row(str(j), 10 * j, WorkerState.STOPPED) for j in (2, 3, 4)]
    pending = [job_row("5", 100, WorkerState.PENDING)]
    rows = [*started, *failed, *pending]
    assert demand.start_failures(rows, "default") == [21, 31, 41]
    assert demand.start_failures(rows, "other") == []
    assert demand.retry_at([41], base=20) == 61
    assert demand.retry_at([21, 31, 41], base=20) == 41 + 80
    assert demand.retry_at([float(i) for i in range(20)], base=20, cap=600) == 19 + 600
    assert demand.retry_at([]) is None
    # a later job whose worker registered: the count starts again
    assert demand.start_failures([*rows, job_row("5", 101, WorkerState.ACTIVE, "n1")],
                                 "default") == []  # fmt: skip
