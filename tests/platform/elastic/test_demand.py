"""The elastic pool's decision, without a cluster: queued trials against live and pending
workers, never more than ``max_workers`` jobs, start failures backed off exponentially."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.elastic import demand
from hyperfleet.platform.elastic.pool import PoolSettings, SlurmPool
from hyperfleet.platform.elastic.slurm import Job, Slurm
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.records import TrialRecord, WorkerRecord
from hyperfleet.spec.states import JobState, SweepStatus, TrialState, WorkerState
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


# -- one decision of the pool, against a scripted Slurm ----------------------------------------
# The real cluster runs in test_slurm_pool.py (long); here a stand-in answers sbatch, squeue
# and scancel so each rule of a decision is shown in milliseconds.


class ScriptedSlurm(Slurm):
    """Jobs held in a dict: submitted ones pend until the test says otherwise."""

    def __init__(self) -> None:
        super().__init__()
        self.listed: dict[str, Job] = {}
        self.commands: list[list[str]] = []
        self.args: list[list[str]] = []

    def submit(self, command: Any, name: str, args: Any, log: Path) -> str:
        job = str(len(self.commands) + 1)
        self.commands.append(list(command))
        self.args.append(list(args))
        self.listed[job] = Job(job, JobState.PENDING, None)
        return job

    def jobs(self, name: str) -> dict[str, Job]:
        return dict(self.listed)

    def cancel(self, job_id: str) -> None:
        self.listed[job_id] = Job(job_id, JobState.CANCELLED, self.listed[job_id].reason)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def time(self) -> float:
        return self.now


@pytest.fixture
def scripted(tmp_path: Path) -> Iterator[tuple[SlurmPool, ScriptedSlurm, Clock]]:
    url = f"sqlite:///{tmp_path / 'hf.db'}"
    cfg = sweep(budget={"trials": 8, "max_concurrent": 4})
    st = Storage(url)
    st.create_sweep("s", cfg.model_dump(mode="json"))
    st.update_sweep("s", status=SweepStatus.SUBMITTED)
    st.close()
    slurm, clock = ScriptedSlurm(), Clock()
    settings = PoolSettings(storage=url, max_workers=2, idle=30.0, start_timeout=60.0,
                            backoff=20.0, log_dir=tmp_path / "jobs", devices="cpu:1")  # fmt: skip
    pool = SlurmPool(settings, slurm, clock)
    yield pool, slurm, clock
    pool.close()


def test_a_decision_submits_up_to_max_workers_then_waits(scripted: Any) -> None:
    pool, slurm, _ = scripted
    assert pool.step().submitted == ["1", "2"]  # 4 trials could run; 2 jobs at most
    assert pool.step().submitted == []  # pending jobs are workers to come
    command = slurm.commands[0]
    assert command[command.index("--exit-when-idle") + 1] == "30s"
    assert "--signal=B:TERM@120" in slurm.args[0], "Slurm's warning drains the worker"
    rows = {w.id: w for w in pool.storage.workers()}
    assert rows["slurm-1"].state == WorkerState.PENDING and rows["slurm-1"].job_id == "1"


def test_start_failures_are_retried_with_backoff_not_in_a_loop(scripted: Any) -> None:
    pool, slurm, clock = scripted
    pool.step()
    for job in ("1", "2"):  # both fail at start: their workers never register
        slurm.listed[job] = Job(job, JobState.FAILED, "NonZeroExitCode")
    d = pool.step()
    assert d.submitted == [] and d.waiting_until == clock.now + 40, "2 failures: 20 s x 2"
    shown = {w.job_id: w for w in pool.storage.workers()}
    assert (shown["1"].job_state, shown["1"].job_reason) == ("FAILED", "NonZeroExitCode")
    clock.now += 41
    assert pool.step().submitted == ["3", "4"]
    slurm.listed["3"] = Job("3", JobState.PENDING, "PartitionConfig")
    clock.now += 61  # pending past --start-timeout: cancelled, its reason kept
    d = pool.step()
    assert "3" in d.cancelled and "4" in d.cancelled and d.submitted == []
    reason = {w.job_id: w.job_reason for w in pool.storage.workers()}["3"]
    assert reason is not None and reason.startswith("PartitionConfig; cancelled after pending")
    assert d.waiting_until == clock.now + 160, "4 failures in a row: 20 s x 8"


def test_a_job_past_its_start_timeout_in_another_state_is_named_and_left(
    scripted: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Only a job Slurm lists as PENDING is cancelled at the start timeout; one it lists in
    another live state is left for the next decision, and the pool says what Slurm listed."""
    pool, slurm, clock = scripted
    pool.step()
    slurm.listed["1"] = Job("1", JobState.CONFIGURING, None)
    clock.now += 61
    with caplog.at_level("WARNING", logger="hyperfleet.platform.elastic.pool"):
        d = pool.step()
    assert "1" not in d.cancelled and "2" in d.cancelled
    assert "job 1: past --start-timeout without a worker, but Slurm lists it as CONFIGURING" in (
        caplog.text
    )
    slurm.listed["1"] = Job("1", JobState.PENDING, "Resources")
    assert "1" in pool.step().cancelled  # the next decision, once it pends again
