"""What a controller does when a user pauses or stops the sweep it serves, on simulated
trials (a virtual clock, real storage, no processes): a paused sweep's running trials go back
to the queue and the controller leaves it; resumed, it finishes its budget with them; a
stopped sweep's running trials end FAIL (stopped), nothing more is launched, and its run ends
KILLED. Closing a sweep never writes over a user's pause or stop."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hyperfleet.platform.controller import Controller, Progress
from hyperfleet.platform.controller.session import close_session
from hyperfleet.platform.launcher.simulated import curve
from hyperfleet.platform.sweeps.lifecycle import resume
from hyperfleet.platform.tracking import NullTracker
from hyperfleet.platform.tracking.records import STOPPED_ERROR
from hyperfleet.spec.states import SWEEP_SERVED, SweepStatus, TrialState
from hyperfleet.testing.controller import Sim


def quadratic(params: Mapping[str, Any], step: int) -> float:
    return (float(params["x"]) - 0.3) ** 2 + 1.0 / step


TEN_STEPS = curve(quadratic, steps=10, every=1, seconds_per_step=1.0)


def halt_midway(sim: Sim, controller: Controller, status: SweepStatus) -> dict[str, Any]:
    """Set the sweep's status to ``status`` once two trials completed and two run, both past
    their second report; what the controller's tracker was, and when."""
    seen: dict[str, Any] = {}
    watch = controller.on_progress
    assert watch is not None

    def progress(p: Progress) -> None:
        watch(p)
        for d in controller.drivers.values():
            seen["tracker"] = d.session.tracker
        running = [t for t in sim.trials() if t.state == TrialState.RUNNING]
        past = len(running) == 2 and all((t.last_step or 0) >= 2 for t in running)
        if "at" not in seen and p.finished == 2 and past:
            assert sim.storage.lifecycle.change(sim.cfg.name, status, SWEEP_SERVED)
            seen["at"] = sim.clock.time()

    controller.on_progress = progress
    return seen


def test_a_stopped_sweep_ends_its_running_trials_and_launches_no_more(tmp_path: Path) -> None:
    sim = Sim(tmp_path, TEN_STEPS, {"budget": {"trials": 6, "max_concurrent": 2}})
    controller = sim.controller()
    seen = halt_midway(sim, controller, SweepStatus.STOPPED)
    summary = sim.run(controller)
    assert "at" in seen
    trials = {t.number: t for t in sim.trials()}
    assert sim.states() == {TrialState.COMPLETE: 2, TrialState.FAIL: 2}, "no trial after"
    stopped = [t for t in trials.values() if t.state == TrialState.FAIL]
    for t in stopped:
        assert t.error == STOPPED_ERROR and t.retries == 0 and t.attempts == 1
        assert t.last_step is not None and 2 <= t.last_step < 10  # its reports kept
    assert sim.optuna_states() == {"COMPLETE": 2, "FAIL": 2}
    assert summary.state_counts["FAIL"] == 2
    assert sim.storage.lifecycle.status(sim.cfg.name) is SweepStatus.STOPPED
    tracker: NullTracker = seen["tracker"]
    assert ("end_parent", ("null-1", "KILLED")) in tracker.calls
    for t in stopped:
        assert ("end_child", (t.mlflow_run_id, TrialState.FAIL)) in tracker.calls


def test_a_paused_sweep_requeues_its_trials_and_finishes_after_resume(tmp_path: Path) -> None:
    sim = Sim(tmp_path, TEN_STEPS, {"budget": {"trials": 6, "max_concurrent": 2}})
    controller = sim.controller()
    seen = halt_midway(sim, controller, SweepStatus.PAUSED)
    assert sim.cfg.name not in controller.run()  # left, not closed
    assert "at" in seen
    assert sim.states() == {TrialState.COMPLETE: 2, TrialState.WAITING: 2}
    paused = [t for t in sim.trials() if t.state == TrialState.WAITING]
    assert all(t.retries == 0 and t.attempts == 1 and t.last_step for t in paused)
    assert sim.storage.lifecycle.status(sim.cfg.name) is SweepStatus.PAUSED
    assert resume(sim.storage.url, sim.cfg.name).status is SweepStatus.SUBMITTED
    summary = sim.run(sim.controller())
    assert summary.state_counts["COMPLETE"] == 6
    again = {t.number: t for t in sim.trials()}
    for t in paused:
        assert again[t.number].attempts == 2 and again[t.number].retries == 0
        assert again[t.number].last_step == 10
    assert sim.storage.lifecycle.status(sim.cfg.name) is SweepStatus.DONE


def test_closing_a_sweep_keeps_a_users_pause_and_ends_a_stopped_run_killed(
    tmp_path: Path,
) -> None:
    sim = Sim(tmp_path, TEN_STEPS)
    for interrupted in (True, False):  # a drain, or the budget's end
        session = _session(sim)  # opened: running
        assert sim.storage.lifecycle.change(sim.cfg.name, SweepStatus.PAUSED, SWEEP_SERVED)
        close_session(session, interrupted=interrupted)
        assert sim.storage.lifecycle.status(sim.cfg.name) is SweepStatus.PAUSED
        assert resume(sim.storage.url, sim.cfg.name).status is SweepStatus.SUBMITTED
    session = _session(sim)
    sim.storage.lifecycle.change(sim.cfg.name, SweepStatus.STOPPED, SWEEP_SERVED)
    close_session(session, interrupted=False, stopped=True)
    assert sim.storage.lifecycle.status(sim.cfg.name) is SweepStatus.STOPPED
    assert isinstance(session.tracker, NullTracker)
    assert ("end_parent", ("null-1", "KILLED")) in session.tracker.calls


def _session(sim: Sim) -> Any:
    from hyperfleet.platform.controller import open_session
    from hyperfleet.platform.storage import Storage

    storage = Storage(str(sim.cfg.storage), clock=sim.clock)
    return open_session(sim.cfg, storage, NullTracker(), None)
