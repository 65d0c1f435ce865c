"""``TrialContext``: everything a workload function sees of the platform.

A workload is ``def main(ctx)``. It reads its hyperparameters from ``ctx.params``, continues
from ``ctx.load_checkpoint()`` if that returns a state, trains to ``ctx.max_steps`` and calls
``ctx.report(step, metrics, checkpoint=...)`` as it goes. ``report`` is collective: every rank
calls it at the same step. Rank 0 saves the checkpoint, records the report and asks the
scheduler for a decision; the decision is broadcast so all ranks act on the same step, and a
prune raises :class:`hyperfleet.TrialPruned` on every rank.

The context knows nothing of how it was scheduled: the runtime hands it a ``reporter``
(rank 0 only) that returns a decision as a plain dict, and catches the ``ScheduleChange``
exceptions that ``report`` raises for an exploit or a pause (population-based training) to
restart the workload in the same processes or end them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from hyperfleet.errors import TrialPruned
from hyperfleet.trials.checkpoint import CheckpointManager
from hyperfleet.trials.distributed import DistEnv, broadcast_object

logger = logging.getLogger(__name__)

#: rank 0's callback: (step, metrics) -> decision as a dict with at least "kind" and "reason"
Reporter = Callable[[int, Mapping[str, float]], dict[str, Any]]

CONTINUE: dict[str, Any] = {"kind": "continue", "reason": ""}


class ScheduleChange(Exception):  # noqa: N818 - control flow, like TrialPruned
    """Raised by ``report`` on every rank when the scheduler changes the trial's course.

    Workloads let it propagate (as they do ``TrialPruned``); the runtime handles it.
    """

    def __init__(self, decision: Mapping[str, Any]) -> None:
        super().__init__(decision.get("reason") or decision["kind"])
        self.decision = dict(decision)


class Exploit(ScheduleChange):
    """Continue from ``decision['donor']``'s checkpoint with ``decision['params']``."""


class Pause(ScheduleChange):
    """Give the devices back; the scheduler resumes the trial later from its checkpoint."""


def _load_from(directory: Path, step: int | None) -> tuple[int, dict[str, Any]] | None:
    """The checkpoint of ``step`` in ``directory``, else the latest one there."""
    manager = CheckpointManager(directory)
    if step is not None:
        try:
            return step, manager.load(step)
        except FileNotFoundError:
            logger.warning("checkpoint of step %d in %s is gone; using the latest", step, directory)
    return manager.load_latest()


class TrialContext:
    """The trial's view of the platform (see the module docstring)."""

    def __init__(
        self,
        *,
        params: Mapping[str, Any],
        env: DistEnv,
        max_steps: int,
        eval_every: int,
        trial_number: int,
        sweep: str,
        config: Any,
        workdir: Path,
        checkpoints: CheckpointManager,
        checkpoint_every: int | None = None,
        reporter: Reporter | None = None,
        restore: tuple[Path, int | None] | None = None,
    ) -> None:
        self.params = dict(params)
        self.env = env
        self.max_steps = max_steps
        self.eval_every = eval_every
        self.trial_number = trial_number
        self.sweep = sweep
        self.config = config
        self.workdir = workdir
        self.checkpoints = checkpoints
        self.checkpoint_every = checkpoint_every
        self._reporter = reporter
        self._restore = restore
        self.resumed_from: int | None = None

    # -- distributed environment ----------------------------------------------------------

    @property
    def rank(self) -> int:
        return self.env.rank

    @property
    def world_size(self) -> int:
        return self.env.world_size

    @property
    def local_rank(self) -> int:
        return self.env.local_rank

    @property
    def device(self) -> torch.device:
        return self.env.device

    @property
    def is_main(self) -> bool:
        return self.env.is_main

    # -- the contract ------------------------------------------------------------------------

    def should_eval(self, step: int) -> bool:
        """True at every ``eval_every``-th step and at the last step."""
        return step % self.eval_every == 0 or step == self.max_steps

    def load_checkpoint(self) -> dict[str, Any] | None:
        """The checkpoint to continue from, or None on a fresh start.

        Normally this trial's latest intact checkpoint; when the runtime says otherwise (a
        PBT member resuming from a donor's weights) the checkpoint it points to.
        """
        if self._restore is not None:
            found = _load_from(*self._restore)
        else:
            found = self.checkpoints.load_latest()
        if found is None:
            return None
        step, state = found
        self.resumed_from = step
        logger.info("trial %s resumes from its checkpoint at step %d", self.trial_number, step)
        return state

    def _checkpoint_due(self, step: int) -> bool:
        if self.checkpoint_every is None:
            return True
        return step % self.checkpoint_every == 0 or step == self.max_steps

    def report(
        self,
        step: int,
        metrics: Mapping[str, float],
        checkpoint: Mapping[str, Any] | None = None,
    ) -> None:
        """Record ``metrics`` at ``step``; may raise ``TrialPruned`` (on every rank)."""
        decision = CONTINUE
        if self.is_main:
            if checkpoint is not None and self._checkpoint_due(step):
                self.checkpoints.save(step, dict(checkpoint))
            if self._reporter is not None:
                clean = {k: float(v) for k, v in metrics.items()}
                decision = self._reporter(step, clean)
        decision = broadcast_object(decision, self.env)
        kind = decision["kind"]
        if kind == "prune":
            raise TrialPruned(decision.get("reason") or f"pruned at step {step}")
        if kind == "exploit":
            raise Exploit(decision)
        if kind == "pause":
            raise Pause(decision)
