"""Fencing (issue 26, finding 1): one live copy of a trial at a time, with real ``hyperfleet
worker`` processes on a real PostgreSQL.

A worker and its trial processes paused (``kill -STOP`` of its whole process tree, as a host
frozen) longer than ``--stale-after`` are taken over by another worker on another "host" (its
own pid and UTS namespaces: it cannot see, so cannot end, the old copy's processes; the trial
directories are shared, as on a shared file system); continued, the old copy finds at its next
report that a newer attempt runs and stops itself with nothing recorded. A
worker paused alone, or with its trials but with no one else to take them, keeps them: no
retry, no relaunch. Every check reads what the processes themselves wrote: the marks file
(``trial pid step`` per accepted report), the trials' records and MLflow's metric history.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperfleet.platform.storage import Storage
from hyperfleet.testing.sweeps import minimal_sweep
from hyperfleet.testing.workers import start_worker, worker_command
from tests.faults.conftest import Marks, alive, wait_dead, wait_until
from tests.integration.cli import cli_env, invoke, trials_by_number

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.long]

STALE_S = 4.0  # --stale-after of every worker here
STEPS = 40


class Fenced:
    """A sweep of in-process trials on PostgreSQL and the workers that serve it, each worker
    in a process group of its own (its in-process trial processes with it)."""

    def __init__(self, root: Path, storage: str, trials: int) -> None:
        self.root = root
        self.storage = storage
        self.workers: dict[str, subprocess.Popen[str]] = {}
        self.data: dict[str, Any] = minimal_sweep(
            name="fenced",
            budget={"trials": trials, "max_concurrent": trials},
            trial={
                "workload": "tests.faults.fencing_workload:main",
                "params": {
                    "marks": str(root / "marks.txt"),
                    "sleep": 0.1,
                    "hold": str(root / "go"),
                    "hold_resumed": str(root / "go-resumed"),
                    "hold_first": str(root / "go-first"),
                },
                "steps": STEPS,
            },
            storage=storage,
            tracking={"uri": f"sqlite:///{root / 'mlflow.db'}", "log_model": False},
            workdir=str(root / "runs"),
        )
        (root / "go-resumed").touch()  # resumed copies go on, unless a test holds them
        (root / "go-first").touch()
        path = root / "sweep.yaml"
        path.write_text(yaml.safe_dump(self.data, sort_keys=False))
        result = invoke("sweep", "submit", str(path))
        assert result.exit_code == 0, result.output[-3000:]

    @property
    def marks(self) -> Marks:
        return Marks(self.root / "marks.txt")

    def start(self, name: str, devices: int, host: str | None = None) -> subprocess.Popen[str]:
        """A worker; ``host``: in pid and UTS namespaces of its own, with that host name."""
        prefix = []
        if host is not None:
            prefix = ["unshare", "--pid", "--fork", "--mount-proc", "--uts", "sh", "-c",
                      f'hostname {host} && exec "$0" "$@"']  # fmt: skip
        cmd = worker_command(
            self.storage,
            devices=f"cpu:{devices}",
            heartbeat="1s",
            stale_after=f"{STALE_S:g}s",
            exit_when_idle="3s",
            prefix=prefix,
        )
        proc = start_worker(
            cmd,
            log=self.root / f"worker-{name}.log",
            env=cli_env(),
            cwd=self.root,
            new_session=True,
        )
        self.workers[name] = proc
        return proc

    def release(self) -> None:
        """Let the trials past step 3 (they wait there while the test starts workers)."""
        (self.root / "go").touch()

    def log(self, name: str) -> str:
        return (self.root / f"worker-{name}.log").read_text(errors="replace")

    def trials(self) -> dict[int, Any]:
        return trials_by_number(self.storage, "fenced")

    def worker_id(self, name: str, host: str | None = None) -> str:
        pid = self.workers[name].pid

        def registered() -> list[str]:
            st = Storage.open_readonly(self.storage)
            try:
                return [
                    w.id for w in st.workers.all() if (w.host == host if host else w.pid == pid)
                ]
            finally:
                st.close()

        wait_until(lambda: bool(registered()), 120, f"worker {name} to register")
        return registered()[0]

    def wait(self, condition: Any, timeout: float, what: str) -> None:
        """``wait_until``, with the workers' logs and the trials' records when it times out."""
        try:
            wait_until(condition, timeout, what)
        except AssertionError as exc:
            logs = "\n".join(f"--- {n}\n{self.log(n)[-3000:]}" for n in self.workers)
            raise AssertionError(f"{exc}\n{self.trials()}\n{logs}") from None

    def reported(self, number: int, steps: int) -> bool:
        t = self.trials().get(number)
        return t is not None and (t.last_step or 0) >= steps

    def finish(self, timeout: float = 180) -> None:
        """Every worker exits by itself (``--exit-when-idle``), without an error logged."""
        for name, proc in self.workers.items():
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                text = self.log(name)[-3000:]
                raise AssertionError(f"worker {name} did not exit:\n{text}") from None
            text = self.log(name)
            assert proc.returncode == 0, text[-3000:]
            assert "Traceback" not in text and " ERROR" not in text, text[-3000:]

    def signal_host(self, name: str, sig: int) -> None:
        """``sig`` to worker ``name`` and every process under it (its in-process trials lead
        process groups of their own), as a host frozen or thawed as a whole."""
        import psutil

        try:
            root = psutil.Process(self.workers[name].pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        for p in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.send_signal(sig)

    def kill_all(self) -> None:
        for name, proc in self.workers.items():
            if proc.poll() is None:
                self.signal_host(name, signal.SIGCONT)
                self.signal_host(name, signal.SIGKILL)
                proc.wait()

    def check(self, trials: int) -> dict[int, dict[int, set[str]]]:
        """The invariants: budget reached, every trial COMPLETE, no process left, each step
        of each trial accepted from one process only and in MLflow exactly once. Returns
        ``{trial: {step: {"host:pid"}}}`` from the marks."""
        from mlflow.tracking import MlflowClient

        records = self.trials()
        assert len(records) == trials
        assert {t.state for t in records.values()} == {"COMPLETE"}, records
        here = socket.gethostname()  # other "hosts" end with their namespace's first process
        wait_dead({pid for _, pid, v in self.marks.events("from") if v.endswith(f" {here}")})
        by_step: dict[int, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
        for trial, pid, value in self.marks.events("step"):
            step, host = value.split()
            by_step[trial][int(step)].add(f"{host}:{pid}")
        client = MlflowClient(tracking_uri=str(self.data["tracking"]["uri"]))
        for number, t in records.items():
            twice = {s: pids for s, pids in by_step[number].items() if len(pids) > 1}
            assert not twice, f"trial {number}: steps reported by two processes: {twice}"
            assert sorted(by_step[number]) == list(range(1, STEPS + 1)), number
            assert t.mlflow_run_id
            history = client.get_metric_history(t.mlflow_run_id, "loss")
            steps = sorted(m.step for m in history)
            assert steps == list(range(1, STEPS + 1)), (number, steps)
        return by_step


@pytest.fixture
def fenced(tmp_path: Path, postgres_url: str, mlflow_template: Path) -> Iterator[Any]:
    shutil.copy(mlflow_template, tmp_path / "mlflow.db")
    made: list[Fenced] = []

    def make(trials: int) -> Fenced:
        made.append(Fenced(tmp_path, postgres_url, trials))
        return made[-1]

    yield make
    for f in made:
        f.kill_all()


def _copies(f: Fenced, number: int) -> set[str]:
    """The trial's processes (``host:pid``) that started its workload."""
    return {f"{v.split()[1]}:{pid}" for t, pid, v in f.marks.events("from") if t == number}


def test_a_paused_host_is_taken_over_and_its_copy_stops_itself(fenced: Any) -> None:
    f = fenced(2)
    (f.root / "go-first").unlink()  # a's trial waits at step 8 until it is paused
    f.start("a", 1)
    f.wait(lambda: f.reported(0, 2) or f.reported(1, 2), 120, "worker a's trial at step 2")
    (mine,) = [n for n, t in f.trials().items() if t.state == "RUNNING"]
    f.start("b", 2, host="hostb")
    b_id = f.worker_id("b", host="hostb")
    f.wait(lambda: len(f.trials()) == 2, 120, "worker b to take the other trial")
    f.release()
    f.wait(lambda: f.reported(mine, 7), 60, "worker a's trial at step 7, waiting at 8")
    (old,) = _copies(f, mine)
    old_pid = int(old.split(":")[1])
    (f.root / "go-resumed").unlink()  # the new copy waits 3 steps in, while the old one stops
    f.signal_host("a", signal.SIGSTOP)  # a's host freezes: worker and trial
    (f.root / "go-first").touch()  # continued, the old copy reports step 8 at once
    paused_at = f.trials()[mine].last_step or 0
    log = f.root / "runs" / "fenced" / f"trial-{mine:04d}" / "log.txt"
    try:
        f.wait(
            lambda: (t := f.trials()[mine]).attempts == 2 and t.worker == b_id
            and (t.last_step or 0) >= paused_at + 2,
            60, f"worker b ({b_id}) to take the silent trial over and resume it",
        )  # fmt: skip
        assert not f.reported(mine, STEPS), "the takeover has steps left to overlap with"
        os.kill(old_pid, signal.SIGCONT)  # the old copy first: it must stop by itself
        f.wait(lambda: "superseded by attempt 2; stopping" in log.read_text(), 30,
               "the old copy to stop itself")  # fmt: skip
    finally:
        f.signal_host("a", signal.SIGCONT)
        (f.root / "go-resumed").touch()
    f.finish()
    by_step = f.check(2)
    t = f.trials()[mine]
    assert (t.attempts, t.retries, t.worker) == (2, 1, b_id)
    assert max(s for s, pids in by_step[mine].items() if old in pids) == paused_at
    assert "Traceback" not in log.read_text()
    assert not alive(old_pid)


def test_a_paused_worker_keeps_its_own_trials(fenced: Any) -> None:
    f = fenced(2)
    f.release()
    f.start("a", 2)
    f.wait(lambda: f.reported(0, 3) and f.reported(1, 3), 120, "both trials at step 3")
    f.signal_host("a", signal.SIGSTOP)  # the worker and its trials, all silent
    time.sleep(STALE_S + 3)
    f.signal_host("a", signal.SIGCONT)
    f.finish()
    f.check(2)
    for n, t in f.trials().items():
        assert (t.attempts, t.retries) == (1, 0), f"trial {n} was relaunched"
        assert len(_copies(f, n)) == 1, f"trial {n} ran in two processes"
    assert "taken over" not in f.log("a") and "requeued" not in f.log("a")


def test_a_worker_paused_alone_is_not_taken_over_while_its_trial_reports(fenced: Any) -> None:
    f = fenced(1)
    f.start("a", 1)
    f.wait(lambda: f.reported(0, 2), 120, "worker a's trial at step 2")
    f.start("b", 1, host="hostb")
    f.worker_id("b", host="hostb")
    f.release()
    f.wait(lambda: f.reported(0, 6), 60, "worker a's trial at step 6")
    os.kill(f.workers["a"].pid, signal.SIGSTOP)  # the worker alone: its trial goes on
    try:
        time.sleep(STALE_S + 3)
        t = f.trials()[0]
        assert (t.state, t.attempts) == ("RUNNING", 1), "a reporting trial was taken over"
    finally:
        os.kill(f.workers["a"].pid, signal.SIGCONT)
    f.finish()
    f.check(1)
    t = f.trials()[0]
    assert (t.attempts, t.retries) == (1, 0)
    assert len(_copies(f, 0)) == 1


# -- the storage rules under the tests above, on both backends --------------------------------


def test_storage_refuses_every_write_of_a_superseded_attempt(db_url: str) -> None:
    from hyperfleet.errors import Superseded

    st = Storage(db_url)
    try:
        st.sweeps.create("s", {})
        assert st.trials.start_attempt("s", 0, state="RUNNING", worker="w1") == 1
        st.trials.record_report("s", 0, 1, {"loss": 1.0}, attempt=1)
        assert st.trials.start_attempt("s", 0, state="RUNNING", worker="w2") == 2
        for write in (
            lambda: st.trials.record_report("s", 0, 2, {"loss": 9.0}, attempt=1),
            lambda: st.trials.upsert("s", 0, fence=1, outcome="complete"),
            lambda: st.trials.check_attempt("s", 0, 1),
        ):
            with pytest.raises(Superseded, match="superseded by attempt 2") as refused:
                write()
            assert refused.value.attempt == 2
        t = st.trials.get("s", 0)
        assert t is not None and (t.last_step, t.metrics, t.outcome) == (1, {"loss": 1.0}, None)
        st.trials.record_report("s", 0, 2, {"loss": 0.5}, attempt=2)
        st.trials.upsert("s", 0, state="WAITING")  # requeued: no attempt may write
        with pytest.raises(Superseded, match="is WAITING"):
            st.trials.record_report("s", 0, 3, {"loss": 0.4}, attempt=2)
        assert st.trials.get("s", 0).last_step == 2  # type: ignore[union-attr]
    finally:
        st.close()


def test_a_takeover_waits_until_the_trial_itself_is_silent(db_url: str) -> None:
    from hyperfleet.platform.storage import WorkerRecord

    st = Storage(db_url)
    try:
        st.sweeps.create("s", {})
        now = time.time()
        lost = WorkerRecord("lost", "elsewhere", 1, "default", [], None, None, now, now - 99, "x")
        st.workers.register(lost)
        for n in (0, 1):
            st.trials.start_attempt("s", n, state="RUNNING", worker="lost", host="elsewhere", pid=1)
        st.trials.upsert("s", 0, heartbeat_at=now)  # reports of its own, its worker silent
        st.trials.upsert("s", 1, heartbeat_at=now - 99)
        (stale,) = st.stale.running("s", 30.0)
        assert stale.number == 1, "a trial that still reports is not taken over"
        st.trials.record_report("s", 1, 5, {"loss": 1.0}, attempt=1)  # it reports after all
        assert not st.stale.take_over(stale), "taken over although it reported since"
        (stale,) = st.stale.running("s", -1.0)[1:]
        assert st.stale.take_over(stale) and not st.stale.take_over(stale)
        t = st.trials.get("s", 1)
        assert t is not None and (t.state, t.retries, t.attempts) == ("WAITING", 1, 1)
    finally:
        st.close()
