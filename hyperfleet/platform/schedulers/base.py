"""The scheduler interface: schedulers return data, the sweep loop acts on it.

A scheduler decides *what* to run and *whether a running trial goes on*; it never touches
processes, files, devices or MLflow. The controller (``platform.controller``) launches what
``suggest`` returns and ends what ``decide`` stops, and rank 0 of a running trial calls
``report`` then ``decide`` at every ``ctx.report``. Because every scheduler keeps its state in
storage, a scheduler object can be rebuilt anywhere from the sweep config and the storage URL:
in the controller, inside a trial's rank 0, or on another host.

This is the split of Optuna's ``trial.report`` / ``trial.should_prune`` and of Syne Tune's
schedulers, and what lets a scheduler be tested without processes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from hyperfleet.spec.states import TrialState  # re-exported: the schedulers' name
from hyperfleet.spec.wire import Decision, DecisionKind, RestorePoint

__all__ = [
    "Capabilities",
    "Decision",
    "DecisionKind",
    "RestorePoint",
    "Scheduler",
    "Suggestion",
    "TrialState",
]


@dataclass(frozen=True)
class Suggestion:
    """A trial to start or resume.

    ``params`` are the sampled values: workload params and, under keys starting with
    ``trial.``, system knobs applied to a copy of the trial config before launch. ``resume`` is
    true when ``trial_number`` already ran and continues from a checkpoint (an interrupted
    trial, a paused PBT member): its own latest one, or ``restore`` when that names another
    (a PBT member continues from a donor's weights at a given step).
    """

    trial_number: int
    params: Mapping[str, Any]
    resume: bool = False
    restore: RestorePoint | None = None


@dataclass(frozen=True)
class Capabilities:
    """What a scheduler supports, stated up front (the CLI and the controller check these
    instead of discovering ``NotImplementedError`` at run time)."""

    enqueue: bool = False
    """Takes user-chosen points ahead of its own suggestions (``sweep enqueue``)."""
    time_sharing: bool = False
    """``decide`` may return EXPLOIT or PAUSE: the trial runtime keeps a checkpoint at every
    report, logs hyperparameters as metrics, and a paused trial gives its devices back."""
    pruning: bool = False
    """``decide`` may return PRUNE."""
    multi_objective: bool = False
    """Ranks trials by several objectives (a Pareto front)."""
    ahead: bool = False
    """A suggestion does not depend on who takes it or when: it may be made before a claim
    asks for it (``budget.ahead``), and is a plain ``(trial_number, params)``."""


@dataclass(frozen=True)
class TrialEnd:
    """How a trial ended, as :meth:`Scheduler.on_trial_end` was told it: its state, its
    objective values (for COMPLETE) and, for a failure, the error."""

    state: TrialState
    values: list[float] | None = None
    error: str | None = None


class Scheduler(ABC):
    """Base class of every scheduler. See the module docstring for the contract."""

    capabilities: ClassVar[Capabilities] = Capabilities()

    @abstractmethod
    def suggest(self) -> Suggestion | None:
        """The next trial to run, or None when nothing should start now."""

    @abstractmethod
    def report(self, trial_number: int, step: int, metrics: Mapping[str, float]) -> None:
        """Record one report. Idempotent per (trial, step): a repeated step is ignored."""

    @abstractmethod
    def decide(self, trial_number: int, step: int) -> Decision:
        """Whether the trial goes on after its report at ``step``."""

    def report_and_decide(
        self, trial_number: int, step: int, metrics: Mapping[str, float], first_try: bool = False
    ) -> Decision:
        """``report`` then ``decide``: a trial's report as its recorder makes it (a scheduler
        may do both in one transaction); safe to repeat, as both are. ``first_try``: the
        caller knows this report was never sent before (not a retry after an error that may
        have come after the commit), so it is never taken for a repeat."""
        self.report(trial_number, step, metrics)
        return self.decide(trial_number, step)

    def on_trial_end(
        self,
        trial_number: int,
        state: TrialState,
        values: list[float] | None = None,
        error: str | None = None,
    ) -> None:
        """Record how a trial ended (values: the objective values, for COMPLETE)."""
        self._end(trial_number, TrialEnd(state, values, error))

    @abstractmethod
    def _end(self, trial_number: int, end: TrialEnd) -> None:
        """What the scheduler does with ``end``, how trial ``trial_number`` ended (the
        subclass's half of :meth:`on_trial_end`)."""

    @abstractmethod
    def requeue(self, trial_number: int) -> None:
        """The trial's processes were stopped before it finished (interrupt, dead worker):
        put it back in the queue so ``suggest`` resumes it from its checkpoint. A trial that
        is not running is left as it is."""

    @abstractmethod
    def running(self) -> set[int]:
        """Trials the scheduler considers running (suggested, not ended, not requeued)."""

    def running_count(self) -> int:
        """How many trials :meth:`running` holds (a scheduler may count them more cheaply:
        a fleet's idle workers ask often, see :mod:`hyperfleet.platform.controller.recovery`)."""
        return len(self.running())

    def learns_from_results(self) -> bool:
        """Its suggestions depend on the results of trials that ended (a suggestion made
        ahead of its claim misses those that end meanwhile). True unless it knows better:
        a random, quasi-random or grid search does not, so any number may be made ahead."""
        return True

    def exhausted(self) -> bool:
        """Nothing to suggest now, known cheaply (a fleet's idle workers ask often, without
        the claim lock): its budget is used and nothing waits. False when unsure; ``suggest``
        decides."""
        return False

    def suggestion_info(self, trial_number: int) -> dict[str, str]:
        """What the scheduler recorded about how it suggested the trial (for MLflow tags)."""
        return {}

    def rung(self, trial_number: int) -> int:
        """The furthest rung of successive halving the running trial reached (higher is
        better; 0 without rungs): how a worker ranks its elastic trials."""
        return 0

    def enqueue(self, params: Mapping[str, Any]) -> int:
        """Put user-chosen params first in the queue (warm start); returns the trial number.
        Only called when ``capabilities.enqueue``."""
        raise TypeError(f"{type(self).__name__} does not take enqueued trials")

    def finished(self) -> bool:
        """True when nothing is left to run, running trials included (default: never)."""
        return False

    def budget_left(self) -> int | None:
        """Trials that may still be suggested, or None if the scheduler doesn't limit them."""
        return None
