"""One decision of the elastic pool at a time, against the in-memory cluster of
``hyperfleet.testing.cluster`` (each rule in milliseconds; the real Slurm runs in
test_slurm_pool.py, long): jobs up to ``max_workers``, start failures backed off, a job
pending too long cancelled, a cluster that does not answer ridden out, every job cancelled
when the pool stops. Beside it, the backend contract on the fake and on Slurm, and Slurm's
``sbatch`` command line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.elastic.backend import ClusterBackend
from hyperfleet.platform.elastic.pool import ElasticPool, PoolSettings
from hyperfleet.platform.elastic.slurm import DRAIN_SIGNAL, Slurm
from hyperfleet.platform.storage import Storage
from hyperfleet.spec.states import JobState, SweepStatus, WorkerState
from hyperfleet.testing.cluster import ClusterBackendContract, FakeCluster
from hyperfleet.testing.sweeps import minimal_sweep
from tests.platform.elastic.conftest import SlurmCluster


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def time(self) -> float:
        return self.now


@pytest.fixture
def scripted(tmp_path: Path) -> Iterator[tuple[ElasticPool, FakeCluster, Clock]]:
    url = f"sqlite:///{tmp_path / 'hf.db'}"
    cfg = parse_sweep(minimal_sweep(name="s", budget={"trials": 8, "max_concurrent": 4}))
    st = Storage(url)
    st.sweeps.create("s", cfg.model_dump(mode="json"))
    st.sweeps.update("s", status=SweepStatus.SUBMITTED)
    st.close()
    cluster, clock = FakeCluster(), Clock()
    settings = PoolSettings(storage=url, max_workers=2, idle=30.0, start_timeout=60.0,
                            backoff=20.0, devices="cpu:1")  # fmt: skip
    pool = ElasticPool(settings, cluster, clock)
    yield pool, cluster, clock
    pool.close()


def test_a_decision_submits_up_to_max_workers_then_waits(scripted: Any) -> None:
    pool, cluster, _ = scripted
    assert pool.step().submitted == ["1", "2"]  # 4 trials could run; 2 jobs at most
    assert pool.step().submitted == []  # pending jobs are workers to come
    command = cluster.commands[0]
    assert command[command.index("--exit-when-idle") + 1] == "30s"
    assert cluster.names["1"] == "hyperfleet-default"
    rows = {w.id: w for w in pool.storage.workers.all()}
    assert rows["fake-1"].state == WorkerState.PENDING and rows["fake-1"].job_id == "1"


def test_start_failures_are_retried_with_backoff_not_in_a_loop(scripted: Any) -> None:
    pool, cluster, clock = scripted
    pool.step()
    for job in ("1", "2"):  # both fail at start: their workers never register
        cluster.move(job, JobState.FAILED, "NonZeroExitCode")
    d = pool.step()
    assert d.submitted == [] and d.waiting_until == clock.now + 40, "2 failures: 20 s x 2"
    shown = {w.job_id: w for w in pool.storage.workers.all()}
    assert (shown["1"].job_state, shown["1"].job_reason) == ("FAILED", "NonZeroExitCode")
    clock.now += 41
    assert pool.step().submitted == ["3", "4"]
    cluster.move("3", JobState.PENDING, "PartitionConfig")
    clock.now += 61  # pending past --start-timeout: cancelled, its reason kept
    d = pool.step()
    assert "3" in d.cancelled and "4" in d.cancelled and d.submitted == []
    reason = {w.job_id: w.job_reason for w in pool.storage.workers.all()}["3"]
    assert reason is not None and reason.startswith("PartitionConfig; cancelled after pending")
    assert d.waiting_until == clock.now + 160, "4 failures in a row: 20 s x 8"


def test_a_job_past_its_start_timeout_in_another_state_is_named_and_left(
    scripted: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Only a job the cluster lists as PENDING is cancelled at the start timeout; one it lists
    in another live state is left for the next decision, and the pool says what it listed."""
    pool, cluster, clock = scripted
    pool.step()
    cluster.move("1", JobState.CONFIGURING)
    clock.now += 61
    with caplog.at_level("WARNING", logger="hyperfleet.platform.elastic.pool"):
        d = pool.step()
    assert "1" not in d.cancelled and "2" in d.cancelled
    assert "job 1: past --start-timeout without a worker, but fake lists it as CONFIGURING" in (
        caplog.text
    )
    cluster.move("1", JobState.PENDING, "Resources")
    assert "1" in pool.step().cancelled  # the next decision, once it pends again


def test_a_job_the_cluster_forgot_is_gone(scripted: Any) -> None:
    pool, cluster, _ = scripted
    pool.step()
    cluster.forget("1")
    assert pool.step().alive == 1, "job 2 only"
    shown = {w.job_id: w for w in pool.storage.workers.all()}
    assert shown["1"].job_state == JobState.GONE


def test_a_cluster_that_does_not_answer_is_ridden_out(scripted: Any) -> None:
    pool, cluster, _ = scripted
    said: list[str] = []

    def stop() -> bool:
        cluster.unreachable = len(said) < 2  # two decisions unanswered, then one answered
        return len(said) == 3

    pool.run(stop, every=0.0, say=said.append)
    assert [line.startswith("fake does not answer") for line in said] == [True, True, False]
    assert "submitted 1, 2" in said[2]


def test_a_stopped_pool_cancels_every_job_it_submitted(scripted: Any) -> None:
    pool, cluster, _ = scripted
    pool.step()
    said: list[str] = []
    assert pool.release(said.append) == []
    assert {j.state for j in cluster.listed.values()} == {JobState.CANCELLED}
    assert pool.alive_jobs() == []
    cluster.unreachable = True
    assert pool.release(said.append) == [], "nothing alive is left to cancel"


def test_slurm_jobs_drain_before_their_limit_unless_told_otherwise(tmp_path: Path) -> None:
    argv = Slurm(log_dir=tmp_path).sbatch_argv(["hyperfleet", "worker"], "hyperfleet-gpu")
    assert argv[:3] == ["sbatch", "--parsable", "--job-name=hyperfleet-gpu"]
    assert DRAIN_SIGNAL in argv and f"--output={tmp_path.resolve()}/worker-%j.log" in argv
    assert argv[-2:] == ["--wrap", "exec hyperfleet worker"], "exec: Slurm's signals reach it"
    own = Slurm(sbatch_args=["--signal=B:USR1@60", "--gres=gpu:1"], log_dir=tmp_path)
    argv = own.sbatch_argv(["w"], "n")
    assert DRAIN_SIGNAL not in argv and "--signal=B:USR1@60" in argv and "--gres=gpu:1" in argv


class TestFakeCluster(ClusterBackendContract):
    @pytest.fixture
    def backend(self) -> ClusterBackend:
        return FakeCluster()


class TestSlurm(ClusterBackendContract):
    """The contract on the one-node Slurm of ``conftest.py`` (skipped where it cannot run)."""

    settle = 30.0

    @pytest.fixture
    def backend(self, slurm_cluster: SlurmCluster, tmp_path: Path) -> ClusterBackend:
        return Slurm(log_dir=tmp_path, env=slurm_cluster.env())
