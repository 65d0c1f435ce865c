"""Issue #26, findings 4 and 6: orphans of in-process trials, a full disk, ``storage_retry``
governing every component through a real PostgreSQL outage, and the MLflow points of a killed
trial copy. Real ``hyperfleet sweep run`` processes and trial processes (the workloads of
``tests/faults/ops_workloads.py``); each test checks the fault suite's invariants."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from hyperfleet.platform.launcher.procs import TRIAL_VAR, trial_tag
from tests.conftest import deep_update
from tests.faults.conftest import Fault, wait_dead, wait_until

FaultMaker = Callable[..., Fault]
WORKLOAD = "tests.faults.ops_workloads:main"


def ops_sweep(fault: FaultMaker, name: str, changes: dict[str, Any] | None = None) -> Fault:
    """A fault sweep named ``name`` of the ops workloads, with ``changes`` merged in."""
    return fault(deep_update({"name": name, "trial": {"workload": WORKLOAD}}, changes or {}))


def tagged_with_sweep(f: Fault) -> list[int]:
    """Live processes carrying a trial tag of ``f``'s sweep (psutil over all processes)."""
    tags = {trial_tag(f.storage, str(f.data["name"]), n) for n in range(16)}
    found = []
    for p in psutil.process_iter():
        try:
            if p.status() != psutil.STATUS_ZOMBIE and p.environ().get(TRIAL_VAR) in tags:
                found.append(p.pid)
        except psutil.Error:
            continue
    return found


def children_of(pids: set[int]) -> set[int]:
    out: set[int] = set()
    for pid in pids:
        try:
            out |= {c.pid for c in psutil.Process(pid).children(recursive=True)}
        except psutil.Error:
            continue
    return out


# 4 -- orphans ------------------------------------------------------------------------------


def test_4_what_an_in_process_trial_starts_ends_with_it(fault: FaultMaker) -> None:
    f = ops_sweep(fault, "orphans", {
        "budget": {"trials": 3, "max_concurrent": 2},
        "trial": {"params": {"mode": "spawn"}},
    })  # fmt: skip
    result = f.run()
    assert result.returncode == 0, result.stderr[-3000:]
    assert set(f.states().values()) == {"COMPLETE"}
    children = {int(v) for _, _, v in f.marks.events("child")}
    assert len(children) == 6  # a sleep and a fork per trial
    wait_dead(children, timeout=5)
    assert tagged_with_sweep(f) == []
    f.check_clean(budget=3)


def test_4_a_killed_controller_takes_its_trials_children_along(fault: FaultMaker) -> None:
    hold = f"{fault().root}/go"
    f = ops_sweep(fault, "orphans-killed", {
        "budget": {"trials": 2, "max_concurrent": 2},
        "trial": {"params": {"mode": "spawn", "hold": hold, "hold_step": 2}},
    })  # fmt: skip
    proc = f.start()
    wait_until(lambda: len(f.marks.events("holds")) == 2, what="two trials holding")
    workers = f.marks.pids()
    everything = workers | children_of(workers) | {int(v) for _, _, v in f.marks.events("child")}
    assert len(everything) >= 2 + 4  # workers, sleeps, forks (and the workers' guards)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    wait_dead(everything, timeout=15)
    assert tagged_with_sweep(f) == []
    Path(hold).touch()
    result = f.run()  # the same command finishes the budget
    assert result.returncode == 0, result.stderr[-3000:]
    assert set(f.states().values()) == {"COMPLETE"}
    wait_dead({int(v) for _, _, v in f.marks.events("child")}, timeout=5)
    assert tagged_with_sweep(f) == []
    f.check_clean(budget=2)


pytestmark = [pytest.mark.slow]
