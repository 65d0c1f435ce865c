"""A sweep whose first ``budget.stop_after_alike_failures`` trials to end all failed alike
launches no more trials, and says so; a success or another cause among them, or 0, keeps it
going (simulated trials: the rule, not the processes)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from hyperfleet.platform.launcher.simulated import Script, SimReport, SimScript, SimTrial
from hyperfleet.spec.states import SweepStatus, TrialState
from hyperfleet.testing.controller import Sim


def ending(code: Callable[[SimTrial], int]) -> Script:
    """A trial that reports once, then its processes exit with ``code(trial)``."""

    def script(t: SimTrial) -> SimScript:
        return SimScript([SimReport(1.0, 1, {"loss": 1.0})], end_at=2.0, exit_code=code(t))

    return script


def sim(tmp_path: Path, code: Callable[[SimTrial], int], **budget: Any) -> Sim:
    changes = {"budget": {"trials": 8, "max_concurrent": 1, "max_retries": 0, **budget}}
    return Sim(tmp_path, ending(code), changes)


def test_the_first_three_failing_alike_stop_the_sweep_for_good(tmp_path: Path) -> None:
    s = sim(tmp_path, lambda t: 1)
    summary = s.run(s.controller())
    assert s.states() == {TrialState.FAIL: 3}, "three trials, not the budget of eight"
    assert sorted(s.launcher.launches) == [0, 1, 2]
    assert summary.stop_cause == "ended fail (1)"
    assert summary.stopped == (
        "stopped: its first 3 trials failed alike with ended fail (1) "
        "(budget.stop_after_alike_failures: 3; fix the cause, then run a new sweep, or this "
        "one again with budget.stop_after_alike_failures: 0)"
    )
    assert summary.to_json()["stopped"] == summary.stopped
    row = s.storage.sweeps.get(s.cfg.name)
    assert row is not None and row.status == SweepStatus.DONE
    # run again (the same command): it stops at once, launching nothing
    again = s.run(s.controller())
    assert sorted(s.launcher.launches) == [0, 1, 2] and again.stopped == summary.stopped


def test_trials_running_when_it_stops_end_as_they_would(tmp_path: Path) -> None:
    s = sim(tmp_path, lambda t: 1, max_concurrent=2)
    summary = s.run(s.controller())
    # two at a time: the third failure is seen once the fourth has started; nothing after it
    assert s.states() == {TrialState.FAIL: 4}
    assert summary.stop_cause == "ended fail (1)"


def test_zero_turns_the_stop_off(tmp_path: Path) -> None:
    s = sim(tmp_path, lambda t: 1, stop_after_alike_failures=0)
    summary = s.run(s.controller())
    assert s.states() == {TrialState.FAIL: 8}
    assert summary.stopped is None


def test_a_success_or_another_cause_among_the_first_keeps_it_going(tmp_path: Path) -> None:
    one = sim(tmp_path / "a", lambda t: 0 if t.number == 1 else 1)
    assert one.run(one.controller()).stopped is None
    assert one.states() == {TrialState.FAIL: 7, TrialState.COMPLETE: 1}
    two = sim(tmp_path / "b", lambda t: 1 + t.number % 2)  # exit 1, 2, 1, ...: two causes
    assert two.run(two.controller()).stopped is None
    assert two.states() == {TrialState.FAIL: 8}


def test_n_failures_that_are_its_whole_budget_are_no_early_stop(tmp_path: Path) -> None:
    s = sim(tmp_path, lambda t: 1, trials=3)
    assert s.run(s.controller()).stopped is None
    assert s.states() == {TrialState.FAIL: 3}


def test_the_number_is_settable(tmp_path: Path) -> None:
    s = sim(tmp_path, lambda t: 1, stop_after_alike_failures=1)
    summary = s.run(s.controller())
    assert s.states() == {TrialState.FAIL: 1}
    assert summary.stopped is not None
    assert summary.stopped.startswith("stopped: its first trial failed with ended fail (1)")


def test_a_busy_worker_does_not_read_ended_trials_at_each_tick(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The rule is read before a claim, with a device free: a worker whose devices are all
    busy ticks at each report without a query for it (a fleet of busy workers read it every
    tick until three trials had ended: most of 1,000 simulated workers' CPU)."""
    from hyperfleet.platform.storage import failures

    reads: list[str] = []
    real = failures.first_ended

    def counted(storage: Any, sweep: str, n: int) -> Any:
        reads.append(sweep)
        return real(storage, sweep, n)

    monkeypatch.setattr(failures, "first_ended", counted)

    def long(t: SimTrial) -> SimScript:
        reports = [SimReport(float(i), i, {"loss": 1.0 / i}) for i in range(1, 31)]
        return SimScript(reports, end_at=31.0, exit_code=0)

    changes = {"budget": {"trials": 2, "max_concurrent": 1}, "trial": {"steps": 30}}
    s = Sim(tmp_path, long, changes, devices=1)
    s.run(s.controller())
    assert s.states() == {TrialState.COMPLETE: 2}
    assert 1 <= len(reads) <= 4, f"{len(reads)} reads of the ended trials for 2 claims"
