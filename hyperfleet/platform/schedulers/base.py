"""The scheduler interface: schedulers return data, the sweep loop acts on it.

A scheduler decides *what* to run and *whether a running trial goes on*; it never touches
processes, files, devices or MLflow. The sweep loop (``platform.sweep``) launches what
``suggest`` returns and ends what ``decide`` stops, and rank 0 of a running trial calls
``report`` then ``decide`` at every ``ctx.report``. Because every scheduler keeps its state in
storage, a scheduler object can be rebuilt anywhere from the sweep config and the storage URL:
in the controller, inside a trial's rank 0, or on another host.

This is the split of Optuna's ``trial.report`` / ``trial.should_prune`` and of Syne Tune's
schedulers, and what lets a scheduler be tested without processes.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hyperfleet.spec.wire import Decision, DecisionKind

__all__ = ["Decision", "DecisionKind", "Scheduler", "Suggestion", "TrialState"]


class TrialState(str, enum.Enum):
    """A trial's state; the names are Optuna's."""

    WAITING = "WAITING"
    RUNNING = "RUNNING"
    COMPLETE = "COMPLETE"
    PRUNED = "PRUNED"
    FAIL = "FAIL"

    @property
    def finished(self) -> bool:
        return self in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


@dataclass(frozen=True)
class Suggestion:
    """A trial to start or resume.

    ``params`` are the sampled hyperparameters (workload params); ``overrides`` are sampled
    trial-configuration keys by dotted path (``"trial.precision"``), applied to a copy of the
    trial config before launch. ``resume`` is true when ``trial_number`` already ran and continues
    from its latest checkpoint (an interrupted trial, a paused PBT member).
    """

    trial_number: int
    params: Mapping[str, Any]
    overrides: Mapping[str, Any] = field(default_factory=dict)
    resume: bool = False

    def restore_point(self) -> tuple[int, int | None] | None:
        """``(trial, step)`` of the checkpoint to resume from when it isn't the trial's own
        latest one (a PBT member resumes from a donor's), else None."""
        member = getattr(self, "checkpoint_member", None)
        if not self.resume or member is None:
            return None
        return int(member), getattr(self, "checkpoint_step", None)


class Scheduler(ABC):
    """Base class of every scheduler. See the module docstring for the contract."""

    #: True when ``decide`` may return EXPLOIT or PAUSE (the trial runtime then keeps
    #: checkpoints at every report it is asked to).
    time_sharing: bool = False

    @abstractmethod
    def suggest(self) -> Suggestion | None:
        """The next trial to run, or None when nothing should start now."""

    @abstractmethod
    def report(self, trial_number: int, step: int, metrics: Mapping[str, float]) -> None:
        """Record one report. Idempotent per (trial, step): a repeated step is ignored."""

    @abstractmethod
    def decide(self, trial_number: int, step: int) -> Decision:
        """Whether the trial goes on after its report at ``step``."""

    @abstractmethod
    def on_trial_end(
        self,
        trial_number: int,
        state: TrialState,
        values: list[float] | None = None,
        error: str | None = None,
    ) -> None:
        """Record how a trial ended (values: the objective values, for COMPLETE)."""

    def requeue(self, trial_number: int) -> None:
        """The trial's processes were stopped before it finished (interrupt, dead worker):
        put it back in the queue so ``suggest`` resumes it from its checkpoint."""
        raise NotImplementedError

    def suggestion_info(self, trial_number: int) -> dict[str, str]:
        """What the scheduler recorded about how it suggested the trial (for MLflow tags)."""
        return {}

    def enqueue(self, params: Mapping[str, Any]) -> int:
        """Put user-chosen params first in the queue (warm start); returns the trial number."""
        raise NotImplementedError(f"{type(self).__name__} does not take enqueued trials")

    def finished(self) -> bool:
        """True when nothing is left to run, running trials included (default: never)."""
        return False

    def budget_left(self) -> int | None:
        """Trials that may still be suggested, or None if the scheduler doesn't limit them."""
        return None

    def pinned_checkpoints(self) -> set[tuple[int, int]]:
        """``(trial, step)`` checkpoints some trial will still load (a PBT member resuming
        from a donor's weights): the trial runtime never prunes them."""
        return set()
