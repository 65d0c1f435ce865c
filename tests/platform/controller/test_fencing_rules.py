"""Fencing rules of the controller, on simulated trials (a virtual clock, real storage): a
controller that was paused itself judges with a fresh heartbeat and never takes its own trials
for stale; one whose trial was taken over stops its copy without counting a retry; a trial recorded
RUNNING under it by a claim whose answer was lost goes back in the queue."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from hyperfleet.platform.launcher.simulated import SimReport, SimScript, SimTrial, curve
from hyperfleet.platform.storage import WorkerRecord
from hyperfleet.testing.controller import Sim


def quadratic(params: Mapping[str, Any], step: int) -> float:
    return (float(params["x"]) - 0.3) ** 2 + 1.0 / step


TEN_STEPS = curve(quadratic, steps=10, every=1, seconds_per_step=1.0)


def _worker(sim: Sim, name: str) -> WorkerRecord:
    now = sim.clock.time()
    return WorkerRecord(name, "vm", 1, "default", [], None, None, now, now, "active")


def _started(sim: Sim, name: str) -> Any:
    """A controller of worker ``name`` with both trials of the sweep running."""
    c = sim.controller(stale_after=30)
    c.worker = _worker(sim, name)
    c._rescan()
    while c.running < 2:
        c._tick()
        sim.clock.advance(0.5)
    return c


def test_a_paused_controller_keeps_its_own_trials(tmp_path: Path) -> None:
    sim = Sim(tmp_path, TEN_STEPS, {"budget": {"trials": 2, "max_concurrent": 2}})
    c = _started(sim, "me")
    sim.clock.advance(60)  # paused: no heartbeat, no report, for twice stale_after
    c._recover()
    assert [(t.state, t.retries) for t in sim.trials()] == [("RUNNING", 0), ("RUNNING", 0)]
    sim.run(c)
    assert [(t.state, t.attempts, t.retries) for t in sim.trials()] == [("COMPLETE", 1, 0)] * 2


def test_a_copy_taken_over_meanwhile_is_stopped_without_a_retry(tmp_path: Path) -> None:
    sim = Sim(tmp_path, TEN_STEPS, {"budget": {"trials": 2, "max_concurrent": 2}})
    c = _started(sim, "me")
    sim.clock.advance(60)
    # another worker found trial 0 silent, took it over and launched attempt 2
    sim.storage.trials.upsert(sim.cfg.name, 0, state="WAITING", retries=1)
    assert sim.storage.trials.start_attempt(sim.cfg.name, 0, state="RUNNING", worker="other") == 2
    driver = c.drivers[sim.cfg.name]
    copy = driver.running[0].handle
    driver.reap()  # its copy of trial 0 reports, is refused and stops; trial 1 completes
    assert copy.log[-1] == "ended superseded (0)" and not driver.running
    t0, t1 = sim.trials()
    assert (t0.state, t0.worker, t0.attempts, t0.retries, t0.outcome) == (
        "RUNNING", "other", 2, 1, None,
    ), "nothing recorded by the old copy, no retry counted"  # fmt: skip
    assert (t1.state, t1.attempts, t1.retries) == ("COMPLETE", 1, 0)
    assert (t0.last_step or 0) < 10, "its refused reports left no trace"


def test_a_copy_requeued_after_its_last_report_ends_without_recording(tmp_path: Path) -> None:
    """Its end is refused (a newer attempt owns the trial): the copy stops as superseded, and
    its worker's loop goes on (the refusal escaped the loop and stopped the worker)."""

    def late_end(t: SimTrial) -> SimScript:
        return SimScript([SimReport(1.0, 1, {"loss": 1.0})], end_at=5.0)

    sim = Sim(tmp_path, late_end, {"budget": {"trials": 2, "max_concurrent": 2}})
    c = _started(sim, "me")
    driver = c.drivers[sim.cfg.name]
    sim.clock.advance(2.0)
    driver.reap()  # the report of step 1: recorded
    copy = driver.running[0].handle
    sim.storage.trials.upsert(sim.cfg.name, 0, state="WAITING", retries=1)
    assert sim.storage.trials.start_attempt(sim.cfg.name, 0, state="RUNNING", worker="other") == 2
    sim.clock.advance(5.0)
    driver.reap()  # both end; trial 0's end is refused
    assert copy.log[-1] == "ended superseded (0)"
    t0, t1 = sim.trials()
    assert (t0.state, t0.worker, t0.attempts, t0.outcome) == ("RUNNING", "other", 2, None)
    assert t1.state == "COMPLETE"


def test_a_claim_requeued_before_its_launch_is_left_to_the_worker_that_took_it(
    tmp_path: Path,
) -> None:
    """This worker stalled between its claim of trial 0 and the launch (a machine out of
    CPU, its heartbeats late) until another worker took it for lost, requeued it and launched
    it. The launch here then starts nothing and writes nothing (it took the record over and
    opened a second lease: two live copies), and the worker goes on with its next claim."""
    sim = Sim(tmp_path, TEN_STEPS, {"budget": {"trials": 2, "max_concurrent": 2}})
    c = sim.controller(stale_after=30)
    c.worker = _worker(sim, "me")
    c._rescan()
    driver = c.drivers[sim.cfg.name]
    claim = driver.claims.claim

    def stalled() -> Any:
        got = claim()
        if got is not None and got.trial_number == 0:  # meanwhile, on another worker:
            sim.storage.trials.upsert(sim.cfg.name, 0, state="WAITING", retries=1)
            sim.storage.trials.start_attempt(sim.cfg.name, 0, state="RUNNING", worker="other")
            sim.storage.leases.open(sim.cfg.name, 0, ["cpu:9"], "other")
        return got

    driver.claims.claim = stalled  # type: ignore[method-assign]
    c._tick()
    assert sorted(driver.running) == [1], "trial 0 not launched here; the next claim was"
    t0 = sim.trials()[0]
    assert (t0.state, t0.worker, t0.attempts, t0.retries) == ("RUNNING", "other", 1, 1)
    leases = [(lease.trial, lease.worker) for lease in sim.storage.leases.all(sim.cfg.name)]
    assert sorted(leases) == [(0, "other"), (1, "me")], "one lease of trial 0: the other's"
    assert ("disown", 0) in driver.session.tracker.calls, "the run made for it here is dropped"
    assert sim.pool.free == sim.pool.size - 1, "its device went back"


def test_a_claim_whose_answer_was_lost_is_requeued_at_the_next_heartbeat(tmp_path: Path) -> None:
    """The connection drops as a claim commits: its retry takes another trial, and the first
    is RUNNING under this worker, kept fresh by its heartbeats, with no copy anywhere. The
    next heartbeat's list of the worker's trials shows it: requeued (no retry counted), run,
    and the sweep ends."""
    sim = Sim(tmp_path, TEN_STEPS, {"budget": {"trials": 3, "max_concurrent": 2}})
    c = sim.controller(stale_after=30)
    c.worker = _worker(sim, "me")
    c._rescan()
    driver = c.drivers[sim.cfg.name]
    claim, lost = driver.claims.claim, []

    def answer_lost() -> Any:
        got = claim()
        if not lost and got is not None:
            lost.append(got.trial_number)
            raise sa.exc.OperationalError("COMMIT", {}, ConnectionError("server closed"))
        return got

    driver.claims.claim = answer_lost  # type: ignore[method-assign]
    for _ in range(4):
        c._tick()
        sim.clock.advance(0.5)
    (orphan,) = lost
    # the retry took trial 1; the orphan holds the other slot of max_concurrent 2
    assert orphan == 0 and sorted(driver.running) == [1] and driver.claims.claim() is None
    record = sim.storage.trials.get(sim.cfg.name, orphan)
    assert record is not None and (record.state, record.worker) == ("RUNNING", "me")
    owned = sim.storage.workers.beat("me")  # what the worker's heartbeat returns
    assert owned == {(sim.cfg.name, 0), (sim.cfg.name, 1)}
    driver.fence(owned, sim.clock.time())
    record = sim.storage.trials.get(sim.cfg.name, orphan)
    assert record is not None and (record.state, record.retries) == ("WAITING", 0)
    assert sorted(driver.running) == [1]  # its launched copy left alone
    sim.run(c)
    trials = sim.trials()
    assert [(t.number, t.state, t.attempts) for t in trials] == [
        (0, "COMPLETE", 1), (1, "COMPLETE", 1), (2, "COMPLETE", 1),
    ]  # fmt: skip
