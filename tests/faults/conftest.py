"""Helpers of the fault suite: sweep files of in-process (or torchrun) trials running the
misbehaving workloads of ``tests/faults/workloads.py``, real ``hyperfleet`` processes, and the
checks every fault test makes (final states, no process left, no duplicate, unique steps)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperfleet.testing.sweeps import deep_update, minimal_sweep
from tests.integration.cli import cli_env, trials_by_number

WORKLOAD = "tests.faults.workloads:main"


def fault_sweep(root: Path, changes: dict[str, Any] | None = None) -> dict[str, Any]:
    data = minimal_sweep(
        name="faulty",
        budget={"trials": 4},
        trial={"workload": WORKLOAD, "params": {"marks": str(root / "marks.txt")}},
        storage=f"sqlite:///{root / 'runs' / 'hf.db'}",
        tracking={"uri": f"sqlite:///{root / 'runs' / 'mlflow.db'}", "log_model": False},
        workdir=str(root / "runs"),
    )
    return deep_update(data, changes or {})


@dataclass
class Marks:
    """What the trials' processes wrote (see ``tests/faults/workloads.py``)."""

    path: Path
    lines: list[tuple[int, int, str, str]] = field(default_factory=list)

    def read(self) -> Marks:
        self.lines = []
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                trial, pid, event, *value = line.split(" ", 3)
                self.lines.append((int(trial), int(pid), event, value[0] if value else ""))
        return self

    def pids(self) -> set[int]:
        return {pid for _, pid, _, _ in self.read().lines}

    def events(self, event: str) -> list[tuple[int, int, str]]:
        return [(t, pid, v) for t, pid, e, v in self.read().lines if e == event]

    def steps(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = defaultdict(list)
        for trial, _, value in self.events("step"):
            out[trial].append(int(value))
        return dict(out)


@dataclass
class Fault:
    root: Path
    data: dict[str, Any]

    @property
    def file(self) -> Path:
        path = self.root / "sweep.yaml"
        path.write_text(yaml.safe_dump(self.data, sort_keys=False))
        return path

    @property
    def marks(self) -> Marks:
        return Marks(self.root / "marks.txt")

    @property
    def storage(self) -> str:
        return str(self.data["storage"])

    def start(self, *args: str) -> subprocess.Popen[str]:
        """``hyperfleet sweep run`` on this sweep, in the background."""
        return subprocess.Popen(
            [sys.executable, "-m", "hyperfleet.platform", "sweep", "run", str(self.file), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(),
        )  # fmt: skip

    def start_held(self, holding: int = 2, timeout: float = 120) -> subprocess.Popen[str]:
        """:meth:`start`, returned once ``holding`` trials hold (the workload's ``hold``)."""
        proc = self.start()
        what = f"{holding} trials holding"
        wait_until(lambda: len(self.marks.events("holds")) == holding, timeout, what)
        return proc

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        proc = self.start(*args)
        out, err = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def trials(self) -> dict[int, Any]:
        return trials_by_number(self.storage, str(self.data["name"]))

    def states(self) -> dict[int, str]:
        return {n: t.state for n, t in self.trials().items()}

    def check_clean(self, budget: int | None = None) -> None:
        """The checks every fault test makes once the sweep is over."""
        marks = self.marks
        assert not marks.events("DUPLICATE"), "a trial ran twice at once"
        wait_dead(marks.pids())
        assert_unique_steps(self)
        if budget is not None:
            assert len(self.trials()) == budget


def wait_until(condition: Callable[[], bool], timeout: float = 120, what: str = "") -> None:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what or condition}")
        time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_dead(pids: set[int], timeout: float = 15) -> None:
    """Every pid ends within ``timeout`` (processes already reaped count as ended)."""
    try:
        wait_until(lambda: not any(alive(p) for p in pids), timeout, "the sweep's processes")
    except AssertionError:
        left = sorted(p for p in pids if alive(p))
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        raise AssertionError(f"processes outlived the sweep: {left}") from None


def assert_unique_steps(f: Fault) -> None:
    """Every trial's MLflow metric history has each step once."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=str(f.data["tracking"]["uri"]))
    for t in f.trials().values():
        if not t.mlflow_run_id:
            continue
        steps = [m.step for m in client.get_metric_history(t.mlflow_run_id, "loss")]
        assert len(steps) == len(set(steps)), (t.number, sorted(steps))


def one_line(stderr: str, start: str) -> None:
    """The user saw exactly one line, starting with ``start``."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(start), stderr[-2000:]


@pytest.fixture
def fault(tmp_path: Path, mlflow_template: Path) -> Callable[..., Fault]:
    """``fault(changes)``: a sweep of in-process trials with its stores under tmp_path."""
    import shutil

    (tmp_path / "runs").mkdir()
    shutil.copy(mlflow_template, tmp_path / "runs" / "mlflow.db")

    def make(changes: dict[str, Any] | None = None) -> Fault:
        return Fault(tmp_path, fault_sweep(tmp_path, changes))

    return make


@pytest.fixture
def cluster() -> Iterator[Any]:
    """A PostgreSQL cluster of the test's own, which it may stop and start (an outage)."""
    from tests.faults.pg import PgCluster

    pg = PgCluster()
    try:
        yield pg
    finally:
        pg.destroy()
