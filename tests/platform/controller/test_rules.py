"""The controller's rules, on simulated trials: a virtual clock, real storage, no processes.

Each test drives a real :class:`Controller` with a real scheduler and SQLite storage; trials
are scripts of reports replayed through the real rank-0 recorder by the simulated launcher.
Starting a process is forbidden in this module (see ``no_processes``).
"""

from __future__ import annotations

import itertools
import multiprocessing
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from hyperfleet.platform.controller import Until
from hyperfleet.platform.launcher.simulated import SimReport, SimScript, SimTrial, curve
from hyperfleet.testing.controller import Sim


@pytest.fixture(autouse=True)
def no_processes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError("a simulated sweep started a process")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    monkeypatch.setattr(multiprocessing.Process, "start", refuse)
    yield


def quadratic(params: Mapping[str, Any], step: int) -> float:
    return (float(params["x"]) - 0.3) ** 2 + 1.0 / step


TEN_STEPS = curve(quadratic, steps=10, every=1, seconds_per_step=1.0)


def test_budget_is_exact_and_concurrency_capped(tmp_path: Path) -> None:
    sim = Sim(tmp_path, TEN_STEPS, {"budget": {"trials": 7, "max_concurrent": 3}}, devices=4)
    summary = sim.run(sim.controller())
    assert summary.state_counts["COMPLETE"] == 7
    assert sim.states() == {"COMPLETE": 7}
    assert sim.optuna_states() == {"COMPLETE": 7}
    assert len(sim.launcher.handles) == 7
    assert sim.max_running == 3, "max_concurrent caps the trials in flight, and is reached"
    assert sim.pool.free == sim.pool.size
    assert all(t.last_step == 10 for t in sim.trials())


def test_devices_cap_concurrency_below_max_concurrent(tmp_path: Path) -> None:
    changes = {
        "budget": {"trials": 5, "max_concurrent": 4},
        "trial": {"resources": {"devices": 2}, "parallel": {"data": 2}},
    }
    sim = Sim(tmp_path, TEN_STEPS, changes, devices=5)
    sim.run(sim.controller())
    assert sim.states() == {"COMPLETE": 5}
    assert sim.max_running == 2, "5 devices hold two trials of 2 devices"
    assert sim.max_leased == 4


def test_budget_timeout_stops_new_trials_and_lets_running_ones_finish(tmp_path: Path) -> None:
    changes = {"budget": {"trials": 20, "max_concurrent": 1, "timeout": "25s"}}
    sim = Sim(tmp_path, TEN_STEPS, changes, devices=1)
    start = sim.clock.time()
    sim.run(sim.controller())
    trials = sim.trials()
    assert [t.state for t in trials] == ["COMPLETE"] * 3
    assert max(t.started_at for t in trials) - start <= 25
    assert max(t.ended_at for t in trials) - start >= 30, "the third ran to its end"


def _stop_when(sim: Sim, controller: Any, condition: Any) -> None:
    """Ask ``controller`` to stop at the first progress tick where ``condition()`` holds."""
    watch = controller.on_progress

    def tick(progress: Any) -> None:
        watch(progress)
        if condition():
            controller.request_stop()

    controller.on_progress = tick


def test_interrupt_requeues_running_trials_and_a_rerun_resumes_them(tmp_path: Path) -> None:
    sim = Sim(tmp_path, TEN_STEPS, {"budget": {"trials": 5, "max_concurrent": 2}})
    first = sim.controller()
    _stop_when(sim, first, lambda: sim.clock.monotonic() >= 15)  # trials 2, 3 are half way
    summary = sim.run(first)
    assert summary.interrupted
    waiting = [t for t in sim.trials() if t.state == "WAITING"]
    assert len(waiting) == 2 and all(0 < (t.last_step or 0) < 10 for t in waiting)
    assert sim.optuna_states() == {"COMPLETE": 2, "WAITING": 2}
    assert sim.launcher.running == 0, "no trial is left running"
    assert sim.pool.free == sim.pool.size
    done_before = {t.number: t.ended_at for t in sim.trials() if t.state == "COMPLETE"}

    summary = sim.run(sim.controller())  # the same sweep again
    assert not summary.interrupted
    assert sim.states() == {"COMPLETE": 5}, "budget exact across the interruption"
    after = {t.number: t for t in sim.trials()}
    assert all(after[n].ended_at == ended for n, ended in done_before.items()), "not rerun"
    for t in waiting:  # resumed as the same trial, after its last recorded step
        resumed = [h for h in sim.launcher.handles if h.spec.number == t.number][-1]
        assert resumed.spec.reported_through == t.last_step
        assert after[t.number].attempts == 2
    assert len(sim.launcher.handles) == 7


def test_trials_the_drains_signal_ended_too_are_requeued_without_a_retry(
    tmp_path: Path,
) -> None:
    """Slurm's ``scancel`` signals every process of a worker's job: its trials may end (exit
    code -15) before the worker's drain stops them. They are stopped, not failed."""
    sim = Sim(tmp_path, TEN_STEPS, {"budget": {"trials": 4, "max_concurrent": 2}})
    controller = sim.controller()
    watch = controller.on_progress

    def tick(progress: Any) -> None:
        watch(progress)
        if sim.clock.monotonic() >= 5 and not controller.stopped:
            for h in sim.launcher.handles:  # the same signal reached the trials' processes
                if h.code is None:
                    h.code = -15
            controller.request_stop()

    controller.on_progress = tick
    summary = sim.run(controller)
    assert summary.interrupted
    trials = sim.trials()
    assert [t.state for t in trials] == ["WAITING", "WAITING"]
    assert [t.retries for t in trials] == [0, 0], "a drain is not a failure"
    assert all(not t.error for t in trials)

    # the same exit without a drain is a failure: retried, and counted
    def killed_once(t: SimTrial) -> SimScript:
        script = TEN_STEPS(t)
        return SimScript(script.reports[:3], end_at=5, exit_code=-15) if t.launch == 1 else script

    alone = Sim(tmp_path / "alone", killed_once, {"budget": {"trials": 1, "max_concurrent": 1}})
    alone.run(alone.controller())
    assert [(t.state, t.retries) for t in alone.trials()] == [("COMPLETE", 1)]


def test_a_pruned_trial_frees_its_devices_at_once(tmp_path: Path) -> None:
    def script(t: SimTrial) -> SimScript:
        bad = t.number >= 2  # later trials are much worse: the median pruner stops them
        value = 10.0 if bad else 1.0
        return curve(lambda p, s: value / s, steps=10, seconds_per_step=1.0)(t)

    changes = {
        "budget": {"trials": 5, "max_concurrent": 1},
        "pruner": {"type": "median", "n_startup_trials": 2, "n_warmup_steps": 2},
    }
    sim = Sim(tmp_path, script, changes, devices=1)
    sim.run(sim.controller())
    trials = sim.trials()
    assert [t.state for t in trials] == ["COMPLETE", "COMPLETE", "PRUNED", "PRUNED", "PRUNED"]
    assert {t.last_step for t in trials[2:]} == {2}, "pruned at the first step after warm-up"
    for ended, started in itertools.pairwise(trials):  # one device, no idle gap
        assert started.started_at - ended.ended_at <= 0.1 + 1e-9
    assert sim.pool.free == 1


def test_a_rejected_knob_combination_is_fail_with_its_reason(tmp_path: Path) -> None:
    changes = {
        "budget": {"trials": 3, "max_concurrent": 1},
        "space": {
            "x": {"type": "float", "low": 0.0, "high": 1.0},
            "trial.parallel.pipeline": {"type": "categorical", "choices": [1, 2]},
        },
    }
    sim = Sim(tmp_path, TEN_STEPS, changes, devices=1)
    from hyperfleet.platform.schedulers import build_scheduler

    sim.controller()  # opens the sweep and its study
    scheduler = build_scheduler(sim.cfg, sim.storage)
    scheduler.enqueue({"x": 0.5, "trial.parallel.pipeline": 2})
    scheduler.enqueue({"x": 0.5, "trial.parallel.pipeline": 1})
    sim.run(sim.controller())
    first, second = sim.trials()[:2]
    assert first.state == "FAIL" and "parallel.pipeline" in (first.error or "")
    assert first.attempts == 0 and first.params["trial.parallel.pipeline"] == 2
    assert second.state == "COMPLETE"
    assert next(h.spec.number for h in sim.launcher.handles) == second.number, "never launched"
    assert sim.optuna_states()["FAIL"] == 1


def test_a_failed_trial_is_fail_with_its_log_and_the_sweep_goes_on(tmp_path: Path) -> None:
    def script(t: SimTrial) -> SimScript:
        if t.number == 1:
            return SimScript([SimReport(1.0, 1, {"loss": 1.0})], end_at=2.0, exit_code=1)
        return TEN_STEPS(t)

    sim = Sim(tmp_path, script, {"budget": {"trials": 3}})
    sim.run(sim.controller())
    states = {t.number: t for t in sim.trials()}
    assert states[1].state == "FAIL" and "exit code 1" in (states[1].error or "")
    assert "ended fail" in (states[1].error or ""), "the trial's log tail is in the error"
    assert [states[n].state for n in (0, 2)] == ["COMPLETE", "COMPLETE"]


def test_a_pbt_pause_gives_the_devices_back(tmp_path: Path) -> None:
    def toy(params: Mapping[str, Any], step: int) -> float:
        return float(params["x"]) * step

    changes = {
        "objective": {"metric": "loss", "mode": "max"},
        "scheduler": {
            "type": "pbt",
            "population": 4,
            "perturbation_interval": 4,
            "seed": 0,
        },
        "budget": {"trials": None, "max_concurrent": 2},
        "trial": {"steps": 12, "eval_every": 2},
    }
    script = curve(toy, steps=12, every=2, seconds_per_step=1.0)
    sim = Sim(tmp_path, script, changes, devices=2)
    sim.run(sim.controller())
    assert sim.states() == {"COMPLETE": 4}
    assert all(t.last_step == 12 for t in sim.trials())
    paused = [h for h in sim.launcher.handles if any("ended paused" in x for x in h.log)]
    assert paused, "time-sharing members paused"
    assert sim.max_running == 2 and sim.max_leased == 2
    assert len(sim.launcher.handles) > 4, "paused members were resumed by later launches"
    assert sim.pool.free == 2


def test_stale_running_trials_of_a_dead_controller_are_requeued(tmp_path: Path) -> None:
    sim = Sim(tmp_path, TEN_STEPS, {"budget": {"trials": 4, "max_concurrent": 2}})
    dead = sim.controller()
    dead._rescan()
    while dead.running < 2 or sim.clock.monotonic() < 3:  # the controller "dies" at t=3
        dead._tick()
        sim.clock.advance(0.5)
    running = dead.drivers["sim"].running
    orphans = sorted(running)
    for r in running.values():
        r.handle.kill()  # its trials' processes went with it; their rows say RUNNING
    assert [t.state for t in sim.trials()] == ["RUNNING", "RUNNING"]
    sim.clock.advance(60)  # silent for longer than stale_after
    sim.run(sim.controller(stale_after=30))
    trials = {t.number: t for t in sim.trials()}
    assert sim.states() == {"COMPLETE": 4}
    assert all(trials[n].attempts == 2 for n in orphans), "resumed, not started anew"


def test_every_launch_leases_devices_for_its_span(tmp_path: Path) -> None:
    changes = {"budget": {"trials": 3, "max_concurrent": 2}}
    sim = Sim(tmp_path, TEN_STEPS, changes, devices=2)
    sim.run(sim.controller())
    leases = sim.storage.leases.all(sim.cfg.name)
    assert sorted(x.trial for x in leases) == [0, 1, 2]
    assert all(x.state == "COMPLETE" and x.ended_at - x.started_at == pytest.approx(10, abs=0.2)
               for x in leases)  # fmt: skip
    first, second, third = leases
    assert {tuple(first.devices), tuple(second.devices)} == {("cpu:0",), ("cpu:1",)}
    assert third.started_at >= min(first.ended_at, second.ended_at), "devices reused"


def test_per_device_k_trials_share_one_slot_and_the_next_waits(tmp_path: Path) -> None:
    changes = {
        "budget": {"trials": 5, "max_concurrent": 5},
        "trial": {"resources": {"devices": 1, "per_device": 4}},
    }
    sim = Sim(tmp_path, TEN_STEPS, changes, devices=1)
    sim.run(sim.controller())
    assert sim.states() == {"COMPLETE": 5}
    assert sim.max_running == 4, "four shares of the one slot run at once, not five"
    leases = sim.storage.leases.all(sim.cfg.name)  # as recorded in SQLite
    assert [(x.devices, x.per_device) for x in leases] == [(["cpu:0"], 4)] * 5
    first, last = leases[:4], leases[4]
    assert sorted(x.share for x in first) == [0, 1, 2, 3]
    assert max(x.started_at for x in first) < min(x.ended_at for x in first), "they overlap"
    freed = min(first, key=lambda x: x.ended_at)
    assert last.started_at >= freed.ended_at, "the fifth waited for a share to come back"
    assert last.share == freed.share
    assert sim.pool.free == 1


def test_trial_timeout_counts_from_the_trial_not_from_a_worker_still_starting(
    tmp_path: Path,
) -> None:
    """A warm worker that takes 30 s to start does not eat a 20 s ``trial.timeout``: trial 0
    (10 s of work) completes; trial 1 hangs and is stopped 20 s after its own start."""

    def script(t: SimTrial) -> SimScript:
        work = TEN_STEPS(t)
        if t.number == 1:
            return SimScript(work.reports[:2], hang=True, starting=30.0)
        return SimScript(work.reports, starting=30.0)

    changes = {"budget": {"trials": 2, "max_concurrent": 2}, "trial": {"timeout": "20s"}}
    sim = Sim(tmp_path, script, changes, devices=2)
    start = sim.clock.monotonic()
    sim.run(sim.controller())
    states = {t.number: t for t in sim.trials()}
    assert states[0].state == "COMPLETE"
    assert states[1].state == "FAIL" and "timed out after 20 s" in (states[1].error or "")
    assert 49.5 <= sim.clock.monotonic() - start < 52.0, "stopped 20 s after its 30 s start-up"


def _two_of_four_left_running(tmp_path: Path) -> Sim:
    """A sweep of 4 trials whose first worker died running 2 of them (rows still RUNNING)."""
    sim = Sim(tmp_path, TEN_STEPS, {"budget": {"trials": 4, "max_concurrent": 4}}, devices=2)
    dead = sim.controller()
    dead._rescan()
    while dead.running < 2:
        dead._tick()
        sim.clock.advance(0.5)
    for r in dead.drivers["sim"].running.values():
        r.handle.kill()  # its worker dies; the rows still say RUNNING
    return sim


def test_trials_requeued_after_the_scheduler_said_nothing_are_taken_at_once(
    tmp_path: Path,
) -> None:
    """A worker that ran its trials and heard "nothing" (the rest of the budget is RUNNING on
    a worker that then dies) takes the requeued trials, instead of closing the sweep with them
    WAITING because it was not due to ask again yet."""
    sim = _two_of_four_left_running(tmp_path)
    sim.run(sim.controller(stale_after=30, ask_every=60))
    assert sim.states() == {"COMPLETE": 4}


def test_an_idle_exiting_worker_stays_to_take_over_a_silent_workers_trials(
    tmp_path: Path,
) -> None:
    """``--exit-when-idle`` shorter than ``stale_after``: a worker that ran out of work does
    not leave while trials of its sweep run on another worker; when that worker goes silent
    it takes them over, instead of leaving them RUNNING with nobody to notice."""
    sim = _two_of_four_left_running(tmp_path)
    sim.run(sim.controller(until=Until(done=False, idle=10), stale_after=30))
    assert sim.states() == {"COMPLETE": 4}
