"""A phantom (a trial the scheduler handed out whose claimer died before recording it) is
requeued when a sweep seems over and when a worker starts; the claim lock is taken for that
only when a look without it finds one, so a fleet's workers starting or ending together do not
queue on the lock one by one."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.controller import open_session
from hyperfleet.platform.controller.recovery import (
    recover,
    requeue_phantoms,
    requeue_phantoms_locked,
)
from hyperfleet.platform.launcher.simulated import curve
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.tracking import NullTracker
from hyperfleet.spec.states import TrialState
from hyperfleet.testing.controller import Sim
from hyperfleet.testing.sweeps import minimal_sweep
from tests.platform.controller.locks import count_claim_locks


def test_the_claim_lock_is_taken_only_when_a_phantom_may_exist(tmp_path: Path) -> None:
    sim = Sim(tmp_path, curve(lambda p, s: float(p["x"]) / s, steps=2))
    sim.run(sim.controller())  # the sweep is done: every trial recorded, nothing running
    s = open_session(sim.cfg, Storage(str(sim.cfg.storage)), NullTracker(), None)
    taken = count_claim_locks(s.storage)
    assert requeue_phantoms_locked(s) == [] and taken == []  # none: no lock
    assert recover(s, 30.0, "another", always=True) == 0 and taken == []  # a worker's start
    phantom = s.scheduler.study.ask()  # type: ignore[attr-defined]  # its claimer died here
    assert requeue_phantoms_locked(s) == [phantom.number] and taken == [sim.cfg.name]
    again = s.scheduler.study.ask()  # type: ignore[attr-defined]  # the same trial, and again
    assert again.number == phantom.number
    assert recover(s, 30.0, "another", always=True) == 1 and taken == [sim.cfg.name] * 2
    assert s.scheduler.running() == set()  # back in the queue
    s.storage.close()


def test_a_trial_that_ends_while_the_records_are_read_is_not_a_phantom(tmp_path: Path) -> None:
    """The scheduler is asked for its running trials, then the records are read; a trial
    whose end is told to the scheduler and recorded in between has no RUNNING record then,
    but is not running either: it is not taken for a phantom (nor warned about)."""
    sim = Sim(tmp_path, curve(lambda p, s: float(p["x"]) / s, steps=2))
    s = open_session(sim.cfg, Storage(str(sim.cfg.storage)), NullTracker(), None)
    suggestion = s.scheduler.suggest()
    assert suggestion is not None
    number = suggestion.trial_number
    s.storage.trials.upsert(s.name, number, state=TrialState.RUNNING, worker="w1")
    read = s.storage.ahead.recorded

    def ending_meanwhile(sweep: str) -> set[int]:
        s.scheduler.on_trial_end(number, TrialState.COMPLETE, [0.5])  # as a driver's _end
        s.storage.trials.upsert(s.name, number, state=TrialState.COMPLETE)
        return read(sweep)

    s.storage.ahead.recorded = ending_meanwhile  # type: ignore[method-assign]
    assert requeue_phantoms(s) == []
    s.storage.ahead.recorded = read  # type: ignore[method-assign]
    assert s.storage.trials.get(s.name, number).state == TrialState.COMPLETE  # type: ignore[union-attr]
    s.storage.close()


def test_the_running_trials_are_read_only_when_the_counts_differ(tmp_path: Path) -> None:
    """A fleet's idle workers look for phantoms every few seconds at a sweep's end: the look
    counts the scheduler's running trials and the records first, and reads the running trials
    only when the scheduler runs more than have a record."""
    sim = Sim(tmp_path, curve(lambda p, s: float(p["x"]) / s, steps=2))
    s = open_session(sim.cfg, Storage(str(sim.cfg.storage)), NullTracker(), None)
    first = s.scheduler.suggest()
    assert first is not None
    s.storage.trials.upsert(s.name, first.trial_number, state=TrialState.RUNNING, worker="w1")
    reads: list[int] = []
    running = s.scheduler.running

    def counted() -> set[int]:
        reads.append(1)
        return running()

    s.scheduler.running = counted  # type: ignore[method-assign]
    assert requeue_phantoms_locked(s) == [] and reads == []  # 1 running, 1 recorded: no read
    phantom = s.scheduler.suggest()  # its claimer died before recording it
    assert phantom is not None
    assert requeue_phantoms_locked(s) == [phantom.trial_number] and reads  # 2 running, 1 recorded
    s.storage.close()


@pytest.mark.parametrize("first", [False, True], ids=["a later look", "a worker's first look"])
def test_a_look_leaves_a_stale_trial_to_the_holder_of_the_claim_lock(
    db_url: str, tmp_path: Path, first: bool
) -> None:
    """A lost worker's trials go stale for a whole fleet at once: a look that finds one while
    another worker holds the claim lock does not queue behind it (a thousand did, each to
    find nothing once the first had requeued them; workers joining the fleet then spent
    minutes in their first look, before their first claim); the trial is requeued by the
    next look that finds the lock free."""
    cfg = parse_sweep(minimal_sweep(name="stale", storage=db_url, workdir=str(tmp_path / "runs"),
                                    budget={"ahead": 0}))  # fmt: skip
    s = open_session(cfg, Storage(db_url), NullTracker(), None)
    first = s.scheduler.suggest()
    assert first is not None
    number = first.trial_number
    s.storage.trials.upsert(s.name, number, state=TrialState.RUNNING, worker="gone",
                           host="elsewhere", pid=1, heartbeat_at=0.0)  # fmt: skip
    held, release = threading.Event(), threading.Event()

    def another_worker() -> None:
        other = Storage(db_url, create=False)
        with other.claim_lock(s.name):
            held.set()
            release.wait(10)
        other.close()

    holder = threading.Thread(target=another_worker)
    holder.start()
    assert held.wait(10)
    try:  # a blocking look would wait the holder's 10 s out, then requeue it: 1
        assert recover(s, 30.0, "me", always=first) == 0
        assert s.storage.trials.get(s.name, number).state == TrialState.RUNNING  # type: ignore[union-attr]
    finally:
        release.set()
        holder.join()
    assert recover(s, 30.0, "me", always=False) == 1
    assert s.storage.trials.get(s.name, number).state == TrialState.WAITING  # type: ignore[union-attr]
    s.storage.close()
