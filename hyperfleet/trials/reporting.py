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

Values before state: :func:`record` checks the metrics (real numbers, converted to floats:
:mod:`hyperfleet.trials.values`) before it saves the checkpoint, and the checkpoint's contents
before they are written. A refusal raises on rank 0; ``report`` then broadcasts
:func:`shared_failure` instead of a decision, so every rank raises the same error at the same
step and none is left waiting at the next collective.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from hyperfleet.errors import Superseded, TrialPruned
from hyperfleet.spec.wire import CONTINUE, Decision, DecisionKind
from hyperfleet.trials.values import CheckpointContentError, ReportValueError, metric_values

if TYPE_CHECKING:
    from hyperfleet.trials.checkpoint import CheckpointManager

__all__ = [
    "CONTINUE",
    "Exploit",
    "Pause",
    "Reporter",
    "ScheduleChange",
    "follow",
    "record",
    "shared_failure",
]

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
    """Rank 0 alone: check the metrics, save ``checkpoint`` when ``due``, record the report,
    return the decision (CONTINUE without a reporter). A metric that is not a real number
    raises ``ReportValueError`` before anything is saved; a superseded copy (a newer attempt
    owns the trial) gets SUPERSEDED, and every rank stops writing nothing. Older checkpoints
    are pruned after the report: its decision has seen which of them other trials will still
    load (a PBT donor's)."""
    step, values = metric_values(step, metrics)
    save = checkpoint is not None and due
    try:
        if save:
            checkpoints.save(step, checkpoint, prune=False)  # checked there before it is written
        decision = CONTINUE if reporter is None else reporter(step, values)
    except Superseded as exc:
        return Decision(DecisionKind.SUPERSEDED, reason=str(exc))
    if save:
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


def shared_failure(exc: Exception, step: object) -> Exception:
    """What every other rank raises when rank 0's record of ``step`` failed with ``exc``: the
    same refusal (so a trial's log ends with one reason whichever rank wrote last), or a
    ``RuntimeError`` that names rank 0's error."""
    if isinstance(exc, (ReportValueError, CheckpointContentError)):
        return type(exc)(str(exc))
    return RuntimeError(
        f"rank 0 could not record the report of step {step}: {type(exc).__name__}: {exc}"
    )
