"""``hyperfleet pool slurm`` on a real one-node Slurm (the ``slurm_cluster`` fixture): workers
as jobs, as many as the queue asks and never more than ``--max-workers``; a cancelled job
costs its trial one checkpoint; a request the cluster cannot grant shows Slurm's reason and
is not resubmitted in a loop."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperfleet.platform.storage import Storage
from hyperfleet.spec.states import JOB_ENDED, TrialState, WorkerState
from hyperfleet.testing.sweeps import minimal_sweep
from hyperfleet.testing.workloads import held_marker
from tests.integration.cli import cli_env, invoke, trials_by_number
from tests.platform.elastic.conftest import SlurmCluster

pytestmark = pytest.mark.long


class Site:
    """A storage, an MLflow store and a working directory for one pool's test."""

    def __init__(self, root: Path, cluster: SlurmCluster, mlflow_template: Path) -> None:
        self.root, self.cluster = root, cluster
        self.storage_url = f"sqlite:///{root / 'hf.db'}"
        shutil.copy(mlflow_template, root / "mlflow.db")
        self.tracking = f"sqlite:///{root / 'mlflow.db'}"

    def submit(self, **overrides: Any) -> str:
        data = minimal_sweep(**overrides)
        data.update(storage=self.storage_url, workdir=str(self.root / "runs"),
                    tracking={"uri": self.tracking, "log_model": False})  # fmt: skip
        path = self.root / f"{data['name']}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        result = invoke("sweep", "submit", str(path))
        assert result.exit_code == 0, result.output
        return str(data["name"])

    def pool(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "hyperfleet.platform", "-v", "pool", "slurm",
                "--storage", self.storage_url, "--log-dir", str(self.root / "jobs"),
                "--devices", "cpu:1", *args]  # fmt: skip

    def run_pool(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = cli_env(SLURM_CONF=str(self.cluster.conf))
        return subprocess.run(self.pool(*args), capture_output=True, text=True, env=env,
                              cwd=self.root, timeout=120)  # fmt: skip

    def storage(self) -> Storage:
        return Storage(self.storage_url, create=False)

    def rows(self) -> list[Any]:
        st = self.storage()
        try:
            return st.workers.all()
        finally:
            st.close()

    def trials(self, sweep: str) -> dict[int, Any]:
        return trials_by_number(self.storage_url, sweep)

    def listed(self, *flags: str) -> list[dict[str, str]]:
        result = invoke("workers", "--storage", self.storage_url, "--json", *flags)
        assert result.exit_code == 0, result.output
        return list(json.loads(result.stdout))


@pytest.fixture
def site(tmp_path: Path, slurm_cluster: SlurmCluster, mlflow_template: Path) -> Site:
    return Site(tmp_path, slurm_cluster, mlflow_template)


def wait(condition: Callable[[], bool], timeout: float, what: str, log: Path | None = None) -> None:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
            raise AssertionError(f"timed out waiting for {what}\n{tail}")
        time.sleep(0.5)


class JobWatch:
    """The most jobs of a name Slurm held alive at once, sampled until stopped."""

    def __init__(self, cluster: SlurmCluster, name: str) -> None:
        self.cluster, self.name, self.most = cluster, name, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def alive(self) -> int:
        out = self.cluster.run("squeue", "--noheader", "--states=all", f"--name={self.name}",
                               "--format=%T")  # fmt: skip
        return sum(1 for s in out.split() if s not in JOB_ENDED)

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.most = max(self.most, self.alive())
            time.sleep(0.2)

    def __enter__(self) -> JobWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture
def running_pool(site: Site) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []

    def start(*args: str) -> subprocess.Popen[str]:
        env = cli_env(SLURM_CONF=str(site.cluster.conf))
        with (site.root / "pool.log").open("w") as out:
            proc = subprocess.Popen(site.pool(*args), stdout=out, stderr=subprocess.STDOUT,
                                    text=True, env=env, cwd=site.root)  # fmt: skip
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_pool_grows_with_the_queue_and_shrinks_to_nothing(
    site: Site, running_pool: Callable[..., subprocess.Popen[str]]
) -> None:
    release = site.root / "release"
    name = site.submit(name="elastic", budget={"trials": 8, "max_concurrent": 2},
                       trial={"params": {"hold_file": str(release), "hold_at": 2,
                                         "hold_trial": 0}})  # fmt: skip
    log = site.root / "pool.log"
    with JobWatch(site.cluster, "hyperfleet-default") as watch:
        pool = running_pool("--max-workers", "2", "--idle", "30s", "--every", "1s")
        # trial 0 holds at step 2 (its checkpoint); its worker's job is cancelled there
        wait(lambda: held_marker(release, 0).exists(), 180, "trial 0 to hold", log)
        held_by = site.trials(name)[0].worker
        job = next(w.job_id for w in site.rows() if w.id == held_by)
        assert job is not None, "a worker of the pool carries its job's id"
        site.cluster.run("scancel", job)
        wait(
            lambda: (
                site.trials(name)[0].state != TrialState.RUNNING
                or site.trials(name)[0].worker != held_by
            ),
            120,
            "the cancelled trial requeued",
            log,
        )
        release.touch()
        wait(lambda: all(t.state == TrialState.COMPLETE for t in site.trials(name).values())
             and len(site.trials(name)) == 8, 240, "all 8 trials COMPLETE", log)  # fmt: skip
        done_at = time.monotonic()
        wait(lambda: watch.alive() == 0, 30 + 30, "every worker job gone", log)
        assert time.monotonic() - done_at <= 60
        submitted = {w.job_id for w in site.rows() if not w.host}
        time.sleep(5)  # the pool decides every second: five more decisions with nothing queued
        assert {w.job_id for w in site.rows() if not w.host} == submitted, "none submitted"
        assert pool.poll() is None
    assert 1 <= watch.most <= 2, f"at most 2 worker jobs at once, saw {watch.most}"
    trials = site.trials(name)
    resumed = trials[0]
    assert resumed.worker != held_by and resumed.attempts == 2, "resumed by another worker"
    assert resumed.retries == 0, "a drain is not a failure"
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=site.tracking)
    runs = client.search_runs(
        [client.get_experiment_by_name(name).experiment_id],
        filter_string="tags.`hyperfleet.trial` = '0'",
    )
    assert [r.info.run_id for r in runs] == [resumed.mlflow_run_id], "one MLflow run"
    steps = [m.step for m in client.get_metric_history(resumed.mlflow_run_id or "", "loss")]
    assert sorted(steps) == [1, 2, 3, 4], f"each step once: {steps}"
    trial_log = Path(resumed.log_path or "").read_text()
    assert "resumes from its checkpoint" in trial_log
    listed = site.listed("--all")
    ours = [x for x in listed if x["job"] == job]
    assert ours and all(x["job state"].startswith("CANCELLED") for x in ours), ours


def test_an_impossible_request_shows_slurms_reason_and_backs_off(site: Site) -> None:
    site.submit(name="wide", budget={"trials": 2, "max_concurrent": 1},
                trial={"resources": {"pool": "big"}})  # fmt: skip
    impossible = f"--sbatch-arg=--cpus-per-task={site.cluster.cpus * 8}"
    args = ("--pool", "big", "--max-workers", "2", impossible, "--once")
    first = site.run_pool(*args)
    assert first.returncode == 0, first.stderr
    assert "submitted" in first.stderr
    pending = [w for w in site.rows() if w.state == WorkerState.PENDING]
    assert len(pending) == 1
    for _ in range(10):  # Slurm gives its reason at its next scheduling pass
        again = site.run_pool(*args)
        assert again.returncode == 0, again.stderr
        assert "submitted" not in again.stderr, "a pending job is a worker to come"
        if "(" in site.listed()[0]["job state"]:
            break
        time.sleep(1)
    shown = site.listed()
    assert [x["state"] for x in shown] == ["pending"]
    assert shown[0]["job state"].startswith("PENDING ("), shown  # e.g. (PartitionConfig)
    # past --start-timeout it is cancelled, and the next decisions back off instead of looping
    # (the pool's next decision acts if one finds Slurm listing the job in another state: it
    # failed to cancel twice in many runs, and the pool now says what Slurm listed then)
    said = []
    for _ in range(3):
        cancel = site.run_pool(*args, "--start-timeout", "1s", "--backoff", "10m")
        said.append(cancel.stderr)
        if "cancelled" in cancel.stderr:
            break
    assert "cancelled" in said[-1], said
    for _ in range(2):
        later = site.run_pool(*args, "--start-timeout", "1s", "--backoff", "10m")
        assert "submitted" not in later.stderr and "next submission after" in later.stderr
    rows = site.rows()
    assert len([w for w in rows if not w.host]) == 1, "one job submitted in all"
    ended = site.listed("--all")
    assert "cancelled after pending" in ended[0]["job state"]


def test_slurms_signal_before_the_time_limit_drains_the_worker(site: Site) -> None:
    """A job of a two-minute limit gets Slurm's SIGTERM 80 s before it (``--signal=B:TERM@80``,
    about 40 s in): its worker drains, the trial goes back to the queue at its checkpoint, not
    FAIL, and the job ends before Slurm kills it."""
    release = site.root / "release"
    name = site.submit(name="limit", budget={"trials": 1, "max_concurrent": 1},
                       trial={"params": {"hold_file": str(release), "hold_at": 2,
                                         "hold_trial": 0}})  # fmt: skip
    log = site.root / "jobs" / "worker-1.log"
    with JobWatch(site.cluster, "hyperfleet-default") as watch:
        started = site.run_pool("--max-workers", "1", "--sbatch-arg=--time=2",
                                "--sbatch-arg=--signal=B:TERM@80", "--once")  # fmt: skip
        assert started.returncode == 0, started.stderr
        wait(lambda: held_marker(release, 0).exists(), 120, "trial 0 to hold", log)
        held = site.trials(name)[0]
        wait(lambda: site.trials(name)[0].state == TrialState.WAITING, 90, "the drain", log)
        wait(lambda: watch.alive() == 0, 60, "the job to end", log)
    trial = site.trials(name)[0]
    assert trial.retries == 0, "a drain is not a failure"
    assert trial.last_step == held.last_step == 2, "requeued at its checkpoint"
    (row,) = [w for w in site.rows() if w.id == held.worker]
    assert row.state == WorkerState.STOPPED, row


def _pool_log(site: Site) -> str:
    path = site.root / "pool.log"
    return path.read_text() if path.exists() else ""


def test_a_frozen_controller_is_ridden_out_and_queued_trials_get_workers(
    site: Site, running_pool: Callable[..., subprocess.Popen[str]]
) -> None:
    """slurmctld frozen (SIGSTOP) for ~25 s while the pool runs: the pool says Slurm does not
    answer and keeps deciding; the trials queued meanwhile get a worker after SIGCONT."""
    import os
    import signal

    log = site.root / "pool.log"
    pool = running_pool("--max-workers", "1", "--idle", "20s", "--every", "1s")
    wait(lambda: "queue wants 0 workers" in _pool_log(site), 60, "a first decision", log)
    ctld = int((site.cluster.root / "ctld.pid").read_text().split()[0])
    os.kill(ctld, signal.SIGSTOP)
    frozen_at = time.monotonic()
    try:
        name = site.submit(name="frozen", budget={"trials": 2, "max_concurrent": 1})
        wait(lambda: "slurm does not answer" in _pool_log(site) or pool.poll() is not None,
             90, "the pool to say Slurm does not answer", log)  # fmt: skip
        assert pool.poll() is None, f"the pool exited\n{_pool_log(site)[-3000:]}"
        # the outage lasts ~25 s whatever the pool does: that is the fault, not a wait
        wait(lambda: time.monotonic() - frozen_at >= 25 or pool.poll() is not None, 60,
             "the outage's end", log)  # fmt: skip
        assert pool.poll() is None, f"the pool exited\n{_pool_log(site)[-3000:]}"
    finally:
        os.kill(ctld, signal.SIGCONT)
    wait(lambda: len(site.trials(name)) == 2
         and all(t.state == TrialState.COMPLETE for t in site.trials(name).values()),
         240, "both trials COMPLETE after the outage", log)  # fmt: skip
    assert pool.poll() is None


def test_a_stopped_pool_cancels_its_jobs_and_min_workers_exit_when_idle(
    site: Site, running_pool: Callable[..., subprocess.Popen[str]]
) -> None:
    """SIGTERM to the pool: every job it submitted, the --min-workers one included, leaves
    squeue within a bounded wait; that job carries --exit-when-idle like the others."""
    import signal

    log = site.root / "pool.log"
    name = "hyperfleet-default"
    watch = JobWatch(site.cluster, name)
    Storage(site.storage_url).close()  # the database the pool and this test read
    pool = running_pool("--max-workers", "2", "--min-workers", "1", "--idle", "10m",
                        "--every", "1s")  # fmt: skip
    wait(lambda: any(w.state == WorkerState.ACTIVE for w in site.rows()), 120,
         "the min-workers job's worker to register", log)  # fmt: skip
    (job,) = {w.job_id for w in site.rows() if w.job_id is not None}
    assert job is not None, "the pool's job and its worker's row name one job"
    script = site.cluster.run("scontrol", "write", "batch_script", job, "-")
    pool.send_signal(signal.SIGTERM)
    pool.wait(timeout=180)
    wait(lambda: watch.alive() == 0, 90, "every job of the pool gone from squeue", log)
    assert "--exit-when-idle 600s" in script, script
