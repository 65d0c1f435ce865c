"""The controller's side of tracking, as an interface: what it tells a tracker, and when.

The controller opens a sweep (:meth:`Tracker.start_parent`), asks for a run for each trial it
launches or resumes (:meth:`Tracker.child`), says how each launch ended
(:meth:`Tracker.end_child`) and closes the sweep (:meth:`Tracker.end_parent`, with a
:class:`SweepView` of the trials as storage holds them). :class:`NullTracker` tracks nothing
(simulated sweeps, controller tests); :class:`~.tracker.SweepTracker` is MLflow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.storage.records import TrialRecord


@dataclass(frozen=True)
class ChildRun:
    """What a trial's run is made of."""

    sweep: str
    parent_id: str
    number: int
    params: Mapping[str, Any]  # the workload's params as the trial gets them
    sampled: Mapping[str, Any] = field(default_factory=dict)  # the scheduler's choices
    knobs: Mapping[str, Any] = field(default_factory=dict)  # sampled system knobs (trial.*)
    config: Mapping[str, Any] = field(default_factory=dict)  # the resolved trial config
    tags: Mapping[str, str] = field(default_factory=dict)
    prior_run_id: str | None = None  # the run of an earlier launch: resume it
    population: bool = False  # a PBT member (its params change during the run)


@dataclass(frozen=True)
class SweepView:
    """The sweep as it closes: its config (as validated) and its trials."""

    name: str
    config: SweepConfig
    trials: Sequence[TrialRecord]  # as storage holds them
    interrupted: bool = False
    stopped: bool = False  # a user stopped the sweep (``sweep stop``): it never continues


class Tracker(Protocol):
    """The controller's side of tracking: the sweep's parent run and a child run per trial."""

    experiment_id: str | None

    @property
    def active(self) -> bool:
        """Whether this session wrote to the sweep (created it, or ran one of its trials)."""
        ...

    def start_parent(self, sweep: str, run_id: str | None, config: SweepConfig) -> str:
        """The sweep's run (created, or ``run_id`` continued); ``config``: the sweep config."""
        ...

    def child(self, run: ChildRun) -> str:
        """The run id of a trial about to launch (created, or its earlier run resumed)."""
        ...

    def end_child(
        self, run_id: str, state: str, final: Mapping[str, float] | None = None, error: str = ""
    ) -> None:
        """A launch of the trial ended in hyperfleet ``state``; ``final``: objective values."""
        ...

    def end_parent(self, run_id: str, status: str, view: SweepView) -> bool:
        """The sweep closes; True when everything is in the tracking store."""
        ...

    def disown(self, number: int) -> None:
        """Trial ``number``'s launch here did not happen (another worker holds the trial): the
        run made for it here, if any, is deleted and never recorded in storage."""
        ...

    def ship_running(self, running: Mapping[int, str]) -> None:
        """Send what the running trials (number -> run id) reported since the last time (at
        most every few seconds, off the caller's thread)."""
        ...

    def resolved(self) -> dict[int, str]:
        """Trials whose run was created after launch: number -> run id, for storage."""
        ...

    def take_created(self) -> list[tuple[int, str]]:
        """The trial runs created since the last call: (number, run id), for storage."""
        ...

    def close(self) -> bool:
        """This session's writes done, without ending the sweep's run (another controller
        still runs its trials); True when everything is in the tracking store."""
        ...


class NullTracker:
    """Tracks nothing (simulated sweeps, tests of the controller): run ids are made up and the
    calls are kept in ``calls`` for assertions."""

    experiment_id: str | None = None
    uri = None

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self._runs = 0

    @property
    def active(self) -> bool:
        return bool(self.calls)

    def _run(self, what: str, detail: Any) -> str:
        self._runs += 1
        self.calls.append((what, detail))
        return f"null-{self._runs}"

    def start_parent(self, sweep: str, run_id: str | None, config: SweepConfig) -> str:
        return run_id or self._run("start_parent", sweep)

    def child(self, run: ChildRun) -> str:
        if run.prior_run_id:
            self.calls.append(("resume_child", run.prior_run_id))
            return run.prior_run_id
        return self._run("start_child", run.number)

    def end_child(
        self, run_id: str, state: str, final: Mapping[str, float] | None = None, error: str = ""
    ) -> None:
        self.calls.append(("end_child", (run_id, state)))

    def end_parent(self, run_id: str, status: str, view: SweepView) -> bool:
        self.calls.append(("end_parent", (run_id, status)))
        return True

    def disown(self, number: int) -> None:
        self.calls.append(("disown", number))

    def ship_running(self, running: Mapping[int, str]) -> None:
        pass

    def resolved(self) -> dict[int, str]:
        return {}

    def take_created(self) -> list[tuple[int, str]]:
        return []

    def close(self) -> bool:
        return True
