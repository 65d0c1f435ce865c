"""Pinned checkpoints: the optional capability of schedulers whose trials load other trials'
checkpoints (PBT and PB2: a member resumes from a donor's weights at a given step).

Such a scheduler also subclasses :class:`PinsCheckpoints`; rank 0's recorder asks it (and only
it: ``isinstance``) which of its trial's checkpoints the trial runtime must never prune. Every
other scheduler knows nothing of checkpoints.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping

from hyperfleet.spec.wire import Decision

Pinned = set[tuple[int, int]]  # (trial, step) checkpoints some trial will still load


class PinsCheckpoints(ABC):
    """A scheduler some of whose trials will load ``(trial, step)`` checkpoints of others."""

    @abstractmethod
    def pinned_checkpoints(self) -> Pinned:
        """``(trial, step)`` checkpoints some trial will still load: never pruned."""

    @abstractmethod
    def report_decide_and_pin(
        self, trial_number: int, step: int, metrics: Mapping[str, float], first_try: bool = False
    ) -> tuple[Decision, Pinned]:
        """``report_and_decide`` (:class:`~hyperfleet.platform.schedulers.base.Scheduler`),
        and :meth:`pinned_checkpoints` as that decision saw them (read in the same
        transaction: the runtime prunes right after a report without asking again)."""
