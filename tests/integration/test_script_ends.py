"""Issue #50: a script trial ends when its program ends, whatever the program left behind.

Real ``hyperfleet sweep run`` processes and tiny programs written by each test: progress
printed with carriage returns is a report per step; a program that leaves a child holding its
output pipe completes as soon as it exits (the child is ended); a detached daemon (``setsid``
and a double fork) is gone when the sweep ends, even one that carries none of the launch's
environment tags.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperfleet.platform.storage import Storage
from hyperfleet.testing.sweeps import minimal_sweep
from tests.faults.conftest import alive, wait_dead
from tests.integration.cli import cli

pytestmark = pytest.mark.slow


def program_sweep(tmp_path: Path, db_url: str, source: str, **trial: Any) -> Path:
    """A one-trial sweep whose ``trial.command`` runs ``source`` (written to ``prog.py``), its
    argv ending with a folder the program may write pids to."""
    program = tmp_path / "prog.py"
    program.write_text(source)
    (tmp_path / "pids").mkdir(exist_ok=True)
    data = minimal_sweep(
        name="prog",
        storage=db_url,
        workdir=str(tmp_path / "runs"),
        budget={"trials": 1, "max_concurrent": 1, "max_retries": 0},
        trial={
            "workload": None,
            "command": ["python", str(program), "${args}", str(tmp_path / "pids")],
            "steps": 1,
            **trial,
        },
    )
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def the_trial(db_url: str) -> Any:
    storage = Storage.open_readonly(db_url)
    try:
        (trial,) = storage.trials.of("prog")
        return trial
    finally:
        storage.close()


def pids(tmp_path: Path) -> set[int]:
    return {int(p.name) for p in (tmp_path / "pids").iterdir()}


LEAVES_A_CHILD = """
import pathlib, subprocess, sys
child = subprocess.Popen(["sleep", "120"])  # inherits stdout and stderr: the pipes stay open
pathlib.Path(sys.argv[-1], str(child.pid)).write_text("")
print("step=1 loss=0.2", flush=True)
"""

LEAVES_A_DAEMON = """
import os, pathlib, sys, time
folder = sys.argv[-1]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:  # the daemon: no parent, no session, no pipe of the program's
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        pathlib.Path(folder, str(os.getpid())).write_text("")
        os.execve("/bin/sleep", ["sleep", "120"], {})  # an environment of its own
    os._exit(0)
while not any(pathlib.Path(folder).iterdir()):
    time.sleep(0.01)
print("step=1 loss=0.2", flush=True)
"""


PROGRESS = """
import sys
for step, loss in ((1, 0.9), (2, 0.5), (3, 0.4)):
    sys.stdout.write(f"\\rstep={step} loss={loss}")
    sys.stdout.flush()
sys.stdout.write("\\n")
"""


def test_progress_printed_with_carriage_returns_is_a_report_per_step(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'store.db'}"
    path = program_sweep(tmp_path, db_url, PROGRESS)
    proc = cli("sweep", "run", str(path), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    trial = the_trial(db_url)
    assert trial.state == "COMPLETE", (trial.state, trial.error)
    log = Path(trial.trial_dir, "log.txt").read_text()
    reported = [line.split(":")[0] for line in log.splitlines() if line.startswith("report ")]
    assert reported == ["report step 1", "report step 2", "report step 3"], log[-2000:]


def test_a_child_holding_the_output_does_not_hold_the_trial(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'store.db'}"
    path = program_sweep(tmp_path, db_url, LEAVES_A_CHILD, timeout="20s")
    start = time.monotonic()
    proc = cli("sweep", "run", str(path), timeout=120)
    took = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr[-3000:]
    trial = the_trial(db_url)
    assert trial.state == "COMPLETE", (trial.state, trial.error)
    # the child sleeps 120 s: a sweep that waited on it would take that long (and its trial
    # would fail at its 20 s timeout); the margin is for a busy machine's start-up
    assert took < 60, f"the sweep took {took:.0f} s: the trial waited on the child"
    wait_dead(pids(tmp_path), timeout=5)


def test_a_detached_daemon_is_gone_when_the_sweep_ends(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'store.db'}"
    path = program_sweep(tmp_path, db_url, LEAVES_A_DAEMON, timeout="20s")
    proc = cli("sweep", "run", str(path), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert the_trial(db_url).state == "COMPLETE"
    (daemon,) = pids(tmp_path)
    try:
        assert not alive(daemon), "the program's daemon outlived the sweep"
    finally:
        import contextlib
        import os
        import signal

        with contextlib.suppress(ProcessLookupError):
            os.kill(daemon, signal.SIGKILL)
