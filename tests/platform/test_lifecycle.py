"""A sweep's lifecycle: ``sweep stop``, ``pause`` and ``resume`` (and the same on
``hyperfleet.load(...)``) on SQLite.

The status changes themselves (storage, the refusals of bad input, the handle) run in this
process; the sweeps they act on run in a real ``sweep run`` process whose trial holds mid-run
(``hyperfleet.testing.workloads.with_hold``), so the pause and the stop reach a trial that is
surely running, and the test reads what storage and MLflow hold afterwards.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import hyperfleet
from hyperfleet.errors import ConfigError
from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.results import NO_COMPLETE_EXIT
from hyperfleet.platform.storage.schema import SweepRow
from hyperfleet.platform.tracking.records import STOPPED_ERROR
from hyperfleet.spec.states import SWEEP_HALTED, SWEEP_SERVED, SweepStatus, TrialState
from hyperfleet.testing.sweeps import minimal_sweep
from hyperfleet.testing.workloads import held_marker
from tests.integration.cli import STORE_POLL_S, cli_env, invoke, wait_until

S = SweepStatus


# -- statuses and storage --------------------------------------------------------------------


def test_paused_and_stopped_sweeps_are_not_served_and_fit_the_status_column() -> None:
    assert {S.PAUSED, S.STOPPED} == SWEEP_HALTED
    assert not SWEEP_HALTED & SWEEP_SERVED  # no worker claims, no elastic pool submits
    width = SweepRow.__table__.c.status.type.length
    assert all(len(s.value) <= width for s in SweepStatus)


def _stored(url: str, name: str = "life", status: SweepStatus | None = None) -> Storage:
    """A storage at ``url`` holding sweep ``name`` (a minimal config) in ``status``."""
    storage = Storage(url)
    cfg = parse_sweep(minimal_sweep(name=name))
    storage.sweeps.create(name, cfg.model_dump(mode="json"))
    if status is not None:
        storage.sweeps.update(name, status=status)
    return storage


def test_a_worker_never_undoes_a_users_pause_or_stop(db_url: str) -> None:
    storage = _stored(db_url, status=S.RUNNING)
    life = storage.lifecycle
    assert life.change("life", S.PAUSED, [S.RUNNING]) is True
    assert life.worker_sets("life", S.RUNNING) is False  # a worker opening it meanwhile
    assert life.worker_sets("life", S.INTERRUPTED) is False  # one draining as it leaves
    assert life.status("life") is S.PAUSED
    assert life.change("life", S.STOPPED, [S.RUNNING]) is False  # not from what it is now
    assert life.change("life", S.STOPPED, [S.PAUSED]) is True
    assert life.worker_sets("life", S.DONE) is False
    assert life.status("life") is S.STOPPED
    assert life.status("nope") is None
    storage.close()


# -- bad input: one line, exit 2, nothing changed --------------------------------------------


@pytest.mark.parametrize(
    ("command", "status", "said"),
    [
        ("stop", S.DONE, "is done (it ran its budget); there is nothing to stop"),
        ("stop", S.STOPPED, "was stopped; a stopped sweep is not run again"),
        ("pause", S.PAUSED, "is already paused; continue it with hyperfleet sweep resume life"),
        ("pause", S.DONE, "there is nothing to pause"),
        ("resume", S.RUNNING, "is running, not paused; only a paused sweep resumes"),
        ("resume", S.INTERRUPTED, "run hyperfleet sweep run with its file again"),
        ("resume", S.STOPPED, "run its file under a new name"),
    ],
)
def test_a_command_that_does_not_apply_is_refused_and_changes_nothing(
    tmp_path: Path, command: str, status: SweepStatus, said: str
) -> None:
    url = f"sqlite:///{tmp_path / 'hf.db'}"
    _stored(url, status=status).close()
    result = invoke("sweep", command, "life", "--storage", url)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], result.stderr
    storage = Storage.open_readonly(url)
    assert storage.lifecycle.status("life") is status
    storage.close()


def test_an_unknown_sweep_gets_the_closest_stored_name(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hf.db'}"
    _stored(url, name="digits-lr", status=S.RUNNING).close()
    for command in ("stop", "pause", "resume"):
        result = invoke("sweep", command, "digits-rl", HYPERFLEET_STORAGE=url)
        assert result.exit_code == 2, result.output
        line = result.stderr.strip()
        assert "no sweep named 'digits-rl'" in line and "did you mean 'digits-lr'" in line, line
    storage = Storage.open_readonly(url)
    assert storage.lifecycle.status("digits-lr") is S.RUNNING
    storage.close()


def test_the_commands_read_hyperfleet_storage_and_say_what_follows(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hf.db'}"
    _stored(url, status=S.RUNNING).close()
    paused = invoke("sweep", "pause", "life", HYPERFLEET_STORAGE=url)
    assert paused.exit_code == 0, paused.output
    assert "paused" in paused.stdout and "hyperfleet sweep resume life" in paused.stdout
    listed = invoke("sweep", "list", "--storage", url)
    assert listed.exit_code == 0 and "paused" in listed.stdout, listed.output
    resumed = invoke("sweep", "resume", "life", HYPERFLEET_STORAGE=url)
    assert resumed.exit_code == 0 and "resumed" in resumed.stdout, resumed.output
    storage = Storage.open_readonly(url)
    assert storage.lifecycle.status("life") is S.SUBMITTED  # served again: workers reopen it
    storage.close()


def test_the_dashboard_shows_a_paused_sweep(tmp_path: Path) -> None:
    from hyperfleet.dashboards.queries import overview

    url = f"sqlite:///{tmp_path / 'hf.db'}"
    _stored(url, status=S.PAUSED).close()
    storage = Storage.open_readonly(url)
    try:
        assert [(r.name, r.status) for r in overview(storage)] == [("life", S.PAUSED)]
    finally:
        storage.close()


# -- sweeps that run -------------------------------------------------------------------------


class Run:
    """A ``sweep run`` of a held sweep in a process of its own, with its stores."""

    def __init__(self, root: Path, mlflow_template: Path, name: str, hold: dict[str, Any]) -> None:
        self.root, self.name = root, name
        runs = root / "runs"
        runs.mkdir(exist_ok=True)
        if not (runs / "mlflow.db").exists():
            shutil.copy(mlflow_template, runs / "mlflow.db")
        self.url = f"sqlite:///{runs / 'hf.db'}"
        self.mlflow = f"sqlite:///{runs / 'mlflow.db'}"
        self.release = root / f"release-{name}"
        data = minimal_sweep(
            name=name,
            budget={"trials": 3, "max_concurrent": 1},
            trial={"steps": 20, "params": {"hold_file": str(self.release), **hold}},
        )
        data.update(storage=self.url, workdir=str(runs),
                    tracking={"uri": self.mlflow, "log_model": False})  # fmt: skip
        self.file = root / f"{name}.yaml"
        self.file.write_text(yaml.safe_dump(data, sort_keys=False))
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        cmd = [sys.executable, "-m", "hyperfleet.platform", "sweep", "run", str(self.file)]
        self.proc = subprocess.Popen(
            cmd, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def storage(self) -> Storage:
        return Storage.open_readonly(self.url)

    def trials(self) -> dict[int, Any]:
        st = self.storage()
        try:
            return {t.number: t for t in st.trials.of(self.name)}
        finally:
            st.close()

    def held(self, trial: int) -> int:
        """Wait for trial ``trial`` to hold; the step it holds at."""
        marker = held_marker(self.release, trial)
        wait_until(marker.exists, f"trial {trial} of {self.name} to hold", self.proc)
        return int(marker.read_text())

    def ended(self, timeout: float = 300) -> tuple[int, str]:
        assert self.proc is not None
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out + err

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


@pytest.fixture
def run(tmp_path: Path, mlflow_template: Path) -> Iterator[Any]:
    made: list[Run] = []

    def make(name: str, **hold: Any) -> Run:
        made.append(Run(tmp_path, mlflow_template, name, hold))
        return made[-1]

    try:
        yield make
    finally:
        for r in made:
            r.close()


def _run_of(mlflow_uri: str, run_id: str) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=mlflow_uri).get_run(run_id)


@pytest.mark.slow
def test_a_paused_sweep_claims_nothing_and_resumes_from_its_checkpoints(run: Any) -> None:
    r = run("paused", hold_at=6, hold_trial=0)
    r.start()
    assert r.held(0) == 6
    handle = hyperfleet.load("paused", storage=r.url)
    assert handle.pause() is S.PAUSED
    # the `sweep run` process leaves the sweep: its trial back in the queue at its checkpoint
    wait_until(
        lambda: r.trials()[0].state == TrialState.WAITING, "trial 0 requeued", r.proc,
        every=STORE_POLL_S,
    )  # fmt: skip
    paused = r.trials()[0]
    assert paused.last_step == 6 and paused.retries == 0 and paused.attempts == 1

    def waits() -> bool:
        return bool(_run_of(r.mlflow, paused.mlflow_run_id).info.status == "SCHEDULED")

    wait_until(waits, "trial 0's MLflow run to wait (SCHEDULED)", r.proc, every=STORE_POLL_S)
    assert _run_of(r.mlflow, paused.mlflow_run_id).data.metrics["stopped_at_step"] == 6
    # no trial is claimed while it stays paused (over two of the process's looks, 2 s apart)
    end = time.monotonic() + 5
    while time.monotonic() < end:
        states = {t.state for t in r.trials().values()}
        assert TrialState.RUNNING not in states, states
        assert r.proc is not None and r.proc.poll() is None, "sweep run ended while paused"
        time.sleep(STORE_POLL_S)
    assert handle.status is S.PAUSED
    r.release.touch()
    assert handle.resume() is S.SUBMITTED
    code, output = r.ended()
    assert code == 0, output[-3000:]
    trials = r.trials()
    assert len(trials) == 3 and {t.state for t in trials.values()} == {TrialState.COMPLETE}
    resumed = trials[0]
    assert resumed.attempts == 2 and resumed.retries == 0 and resumed.last_step == 20
    # resumed from its checkpoint at step 6: each step reported once, in one MLflow run
    from mlflow.tracking import MlflowClient

    history = MlflowClient(tracking_uri=r.mlflow).get_metric_history(resumed.mlflow_run_id, "loss")
    assert sorted(m.step for m in history) == list(range(1, 21))
    assert resumed.mlflow_run_id == paused.mlflow_run_id
    assert hyperfleet.load("paused", storage=r.url).status is S.DONE


@pytest.mark.slow
def test_a_stopped_sweep_ends_its_trials_and_says_so_in_mlflow(run: Any) -> None:
    r = run("stopped", hold_at=5, hold_trial=0)
    r.start()
    assert r.held(0) == 5
    assert hyperfleet.load("stopped", storage=r.url).stop() is S.STOPPED
    code, output = r.ended()
    assert code == NO_COMPLETE_EXIT, output[-3000:]  # it ended, its one trial stopped
    assert f"trial 0 failed: {STOPPED_ERROR}" in output, output[-3000:]
    trials = r.trials()
    stopped = trials[0]
    assert stopped.state == TrialState.FAIL and stopped.error == STOPPED_ERROR
    assert stopped.last_step == 5 and stopped.retries == 0  # its reports kept, not retried
    assert all(t.state != TrialState.RUNNING for t in trials.values())
    assert not any(t.attempts for n, t in trials.items() if n != 0), "a trial was claimed"
    st = r.storage()
    row = st.sweeps.get("stopped")
    st.close()
    assert row is not None and row.status is S.STOPPED
    parent = _run_of(r.mlflow, row.mlflow_parent_run_id or "")
    assert parent.info.status == "KILLED" and parent.data.tags["hyperfleet.state"] == "STOPPED"
    child = _run_of(r.mlflow, stopped.mlflow_run_id)
    assert child.data.tags["hyperfleet.error"] == STOPPED_ERROR
    # MLflow lost the sweep run's end (a store restored, an outage): sync ends it again
    from mlflow.tracking import MlflowClient

    MlflowClient(tracking_uri=r.mlflow).update_run(parent.info.run_id, status="RUNNING")
    synced = invoke("mlflow", "sync", "--storage", r.url, "--sweep", "stopped")
    assert synced.exit_code == 0, synced.output
    assert _run_of(r.mlflow, parent.info.run_id).info.status == "KILLED"
    # never run again, by the same command or by hand
    again = invoke("sweep", "run", str(r.file))
    assert again.exit_code == 2 and "was stopped" in again.stderr, again.output
    with pytest.raises(ConfigError, match="was stopped"):
        hyperfleet.load("stopped", storage=r.url).resume()


@pytest.mark.slow
def test_stopping_a_sweep_no_worker_runs_ends_its_mlflow_run(run: Any) -> None:
    r = run("submitted")
    summary = hyperfleet.submit(str(r.file), storage=r.url)
    assert summary.status is S.SUBMITTED
    assert hyperfleet.load("submitted", storage=r.url).stop() is S.STOPPED
    st = r.storage()
    row = st.sweeps.get("submitted")
    st.close()
    assert row is not None and row.mlflow_parent_run_id
    parent = _run_of(r.mlflow, row.mlflow_parent_run_id)
    assert parent.info.status == "KILLED" and parent.data.tags["hyperfleet.state"] == "STOPPED"
    with pytest.raises(ConfigError, match="was stopped"):
        hyperfleet.submit(str(r.file), storage=r.url)


def test_a_paused_sweep_is_not_submitted_again(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hf.db'}"
    _stored(url, status=S.PAUSED).close()
    with pytest.raises(ConfigError, match="is paused; resume it first"):
        hyperfleet.submit(minimal_sweep(name="life", workdir=str(tmp_path)), storage=url)
