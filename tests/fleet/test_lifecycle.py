"""A sweep's lifecycle across a fleet: two real ``hyperfleet worker`` processes on PostgreSQL
serve a submitted sweep; ``sweep pause`` sends its running trials back to the queue on both
and neither claims one while another sweep keeps them busy; ``sweep resume`` lets them finish
its budget from the paused trials' checkpoints; ``sweep stop`` of the other sweep ends its
trials and both workers leave it for good, and ``sweep delete`` then removes it while they
serve on; a sweep submitted with ``--trials`` runs that many, not its file's."""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest

from hyperfleet.platform.tracking.records import STOPPED_ERROR
from hyperfleet.spec.states import SweepStatus, TrialState
from hyperfleet.testing.sweeps import minimal_sweep
from hyperfleet.testing.workloads import held_marker
from tests.fleet.conftest import Fleet
from tests.integration.cli import STORE_POLL_S, invoke

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.long]


def held_sweep(fleet: Fleet, name: str, trials: int, hold_at: int) -> dict[str, Any]:
    """A sweep whose every trial holds at its first report at or past ``hold_at`` until the
    file ``release-NAME`` exists (:func:`hyperfleet.testing.workloads.with_hold`)."""
    hold = {"hold_file": str(fleet.root / f"release-{name}"), "hold_at": hold_at}
    return minimal_sweep(
        name=name,
        budget={"trials": trials, "max_concurrent": 4},
        trial={"steps": 20, "params": hold},
    )


def status(fleet: Fleet, name: str) -> SweepStatus | None:
    st = fleet.storage()
    try:
        return st.lifecycle.status(name)
    finally:
        st.close()


def running(fleet: Fleet, name: str) -> list[int]:
    return [n for n, t in fleet.trials(name).items() if t.state == TrialState.RUNNING]


def held(fleet: Fleet, name: str, numbers: range) -> list[int]:
    return [n for n in numbers if held_marker(fleet.root / f"release-{name}", n).exists()]


def test_two_workers_pause_resume_and_stop_sweeps(fleet: Fleet) -> None:
    url = fleet.storage_url
    fleet.submit(fleet.sweep(held_sweep(fleet, "tuned", trials=6, hold_at=5), "tuned.yaml"))
    w0 = fleet.start("w0", "--devices", "cpu:2")
    w1 = fleet.start("w1", "--devices", "cpu:2")
    fleet.wait(lambda: len(held(fleet, "tuned", range(6))) == 4, 240, "4 trials held at step 5")
    first = sorted(running(fleet, "tuned"))
    assert len(first) == 4
    workers = {fleet.trials("tuned")[n].worker for n in first}
    assert len(workers) == 2, "both workers serve the sweep"

    paused = invoke("sweep", "pause", "tuned", "--storage", url)
    assert paused.exit_code == 0, paused.output
    fleet.wait(lambda: not running(fleet, "tuned"), 120, "the paused trials back in the queue")
    trials = fleet.trials("tuned")
    for n in first:
        assert trials[n].state == TrialState.WAITING and trials[n].last_step == 5
        assert trials[n].attempts == 1 and trials[n].retries == 0
    for w in (w0, w1):
        fleet.wait(lambda w=w: "sweep tuned was paused" in w.text(), 30, f"{w.name} left it")

    # the workers, idle, take another sweep's trials, and still none of the paused one's
    fleet.submit(fleet.sweep(held_sweep(fleet, "other", trials=2, hold_at=3), "other.yaml"))
    fleet.wait(lambda: len(held(fleet, "other", range(2))) == 2, 240, "the other sweep's trials")
    end = time.monotonic() + 5  # two looks of each worker at its sweeps' statuses
    while time.monotonic() < end:
        assert not running(fleet, "tuned"), "a trial of the paused sweep was claimed"
        time.sleep(STORE_POLL_S)
    assert {t.attempts for n, t in fleet.trials("tuned").items() if n in first} == {1}
    assert status(fleet, "tuned") is SweepStatus.PAUSED

    ran = {t.worker for t in fleet.trials("other").values()}  # those it stops trials of
    stopped = invoke("sweep", "stop", "other", "--storage", url)
    assert stopped.exit_code == 0, stopped.output
    fleet.wait(lambda: not running(fleet, "other"), 120, "the stopped sweep's trials ended")
    assert status(fleet, "other") is SweepStatus.STOPPED
    for t in fleet.trials("other").values():
        assert t.state == TrialState.FAIL and t.error == STOPPED_ERROR and t.last_step == 3
        assert t.retries == 0
    # a worker that ran its trials says it left it; one that ran none may see the sweep over
    # (nothing running anywhere) and close it before its next look at the statuses
    runners = [w for w in (w0, w1) if w.id(fleet) in ran]
    assert runners, ran
    fleet.wait(
        lambda: all("sweep other was stopped" in w.text() for w in runners), 30, "they left it"
    )
    deleted = invoke("sweep", "delete", "other", "--yes", "--storage", url)
    assert deleted.exit_code == 0, deleted.output
    assert fleet.trials("other") == {} and status(fleet, "other") is None

    (fleet.root / "release-tuned").touch()
    resumed = invoke("sweep", "resume", "tuned", "--storage", url)
    assert resumed.exit_code == 0, resumed.output
    fleet.wait(lambda: status(fleet, "tuned") is SweepStatus.DONE, 300, "the sweep's budget")
    trials = fleet.trials("tuned")
    assert len(trials) == 6 and {t.state for t in trials.values()} == {TrialState.COMPLETE}
    for n in first:  # resumed once each, from their checkpoints, no retry counted
        assert trials[n].attempts == 2 and trials[n].retries == 0 and trials[n].last_step == 20
    assert fleet.trials("other") == {}, "the deleted sweep came back"

    smoke = minimal_sweep(name="smoke", budget={"trials": 6, "max_concurrent": 4})
    fleet.submit(fleet.sweep(smoke, "smoke.yaml"), "--trials", "2", "--timeout", "5m")
    fleet.wait(lambda: status(fleet, "smoke") is SweepStatus.DONE, 300, "the smoke run's budget")
    trials = fleet.trials("smoke")
    assert len(trials) == 2 and {t.state for t in trials.values()} == {TrialState.COMPLETE}

    for w in (w0, w1):
        w.proc.send_signal(signal.SIGTERM)
    fleet.finish(timeout=120)
