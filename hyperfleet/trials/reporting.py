"""The report protocol: a trial says where it is, and every rank hears what to do next.

``ctx.report(step, metrics, checkpoint=...)`` is collective: every rank calls it at the same
step. Rank 0 *records* the report: it saves the checkpoint (when one is due), hands the metrics
to the runtime's :data:`Reporter` and gets back a :class:`~hyperfleet.spec.wire.Decision`
(the scheduler's, in a sweep). The decision is broadcast (it pickles), and every rank *follows*
it at the same step: CONTINUE returns; PRUNE raises :class:`hyperfleet.TrialPruned`; EXPLOIT and
PAUSE (population-based training) raise :class:`Exploit` and :class:`Pause`, which workloads let
propagate and the runtime catches, to restart the workload from a donor's checkpoint in the
same processes or to end them. When storage refuses the report (or the checkpoint's save: a
newer attempt of the trial runs) rank 0 answers SUPERSEDED and every rank raises
:class:`hyperfleet.errors.Superseded`: the copy stops with nothing more written.

A loop where rank 0 reports by itself (a parameter server) calls :func:`record` on rank 0 and
:func:`follow` on every rank when they next meet; ``report`` is both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from hyperfleet.errors import Superseded, TrialPruned
from hyperfleet.spec.wire import CONTINUE, Decision, DecisionKind

if TYPE_CHECKING:
    from hyperfleet.trials.checkpoint import CheckpointManager

__all__ = ["CONTINUE", "Exploit", "Pause", "Reporter", "ScheduleChange", "follow", "record"]

Reporter = Callable[[int, Mapping[str, float]], Decision]
"""Rank 0's callback from the runtime: ``(step, metrics) -> Decision``."""


class ScheduleChange(Exception):  # noqa: N818 - control flow, like TrialPruned
    """Raised by ``report`` on every rank when the scheduler changes the trial's course.

    Workloads let it propagate (as they do ``TrialPruned``); the runtime handles it.
    """

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.reason or decision.kind.value)
        self.decision = decision


class Exploit(ScheduleChange):
    """Continue from ``decision.donor``'s checkpoint (at ``decision.donor_step``) with
    ``decision.params``."""


class Pause(ScheduleChange):
    """Give the devices back; the scheduler resumes the trial later from its checkpoint."""


def record(
    step: int,
    metrics: Mapping[str, float],
    checkpoint: Mapping[str, Any] | None,
    *,
    checkpoints: CheckpointManager,
    due: bool,
    reporter: Reporter | None,
) -> Decision:
    """Rank 0 alone: save ``checkpoint`` when ``due``, record the report, return the decision
    (CONTINUE without a reporter). Older checkpoints are pruned after the report: its
    decision has seen which of them other trials will still load (a PBT donor's)."""
    state = dict(checkpoint) if checkpoint is not None and due else None
    try:
        if state is not None:
            checkpoints.save(step, state, prune=False)
        decision = (
            CONTINUE
            if reporter is None
            else reporter(step, {k: float(v) for k, v in metrics.items()})
        )
    except Superseded as exc:  # a newer attempt owns the trial: every rank stops, writing nothing
        return Decision(DecisionKind.SUPERSEDED, reason=str(exc))
    if state is not None:
        checkpoints.prune()
    if not isinstance(decision, Decision):
        raise TypeError(
            f"the trial's reporter returned a {type(decision).__name__}; expected a "
            f"hyperfleet.spec.wire.Decision"
        )
    return decision


def follow(decision: Decision, step: int | None = None) -> None:
    """Act on a decision: raise ``TrialPruned``, ``Exploit`` or ``Pause`` (or return)."""
    if decision.kind == DecisionKind.PRUNE:
        raise TrialPruned(decision.reason or f"pruned at step {step}")
    if decision.kind == DecisionKind.EXPLOIT:
        raise Exploit(decision)
    if decision.kind == DecisionKind.PAUSE:
        raise Pause(decision)
    if decision.kind == DecisionKind.SUPERSEDED:
        raise Superseded(decision.reason)
