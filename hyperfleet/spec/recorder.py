"""The recorder: rank 0's side of ``ctx.report``, the one contract between a trial's runtime
and whoever started its processes.

The runtime (:mod:`hyperfleet.trials.runtime`) is handed a :data:`RecorderFactory` and builds
rank 0's recorder from the trial's spec; it then calls only the methods below. Implementations:
the platform's :class:`~hyperfleet.platform.recorder.RankZeroRecorder` (storage, the
scheduler's decision, MLflow), :class:`~hyperfleet.trials.runtime.PrintRecorder`
(``hyperfleet train``, ``sweep replay``: reports printed) and
:class:`~hyperfleet.testing.launchers.QuietRecorder` (simulated trials in tests). Each
subclasses :class:`Recorder` to say so; ``tests/test_recorder_protocol.py`` checks that each
defines every method with the protocol's parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from hyperfleet.spec.wire import Decision, TrialSpec


@runtime_checkable
class Recorder(Protocol):
    """Rank 0's side of ``ctx.report``: record a report and return the decision."""

    def __call__(self, step: int, metrics: Mapping[str, float]) -> Decision:
        """Record the report of ``step`` and return the scheduler's decision on it (every
        rank follows it at the same step)."""
        ...

    def rewind(self, step: int, params: Mapping[str, Any], donor: int) -> None:
        """After an exploit the trial continues from the donor's ``step`` with ``params``."""
        ...

    def finish(self, outcome: str) -> None:
        """The workload ended: ``complete``, ``pruned``, ``paused`` or ``fail``; or
        ``superseded``: a newer attempt owns the trial, nothing is recorded."""
        ...

    def pinned_steps(self) -> set[int] | None:
        """This trial's checkpoint steps another trial will still load (never pruned);
        None when unknown (then none are pruned)."""
        ...

    def note(self, message: str, restart: bool = True) -> None:
        """Something the user should know about this trial (kept in its record); with
        ``restart`` (the trial starts over), reports are recorded again from the start."""
        ...

    def check(self) -> None:
        """Raise :class:`~hyperfleet.errors.Superseded` when a newer attempt owns the trial:
        asked before each checkpoint save (:mod:`hyperfleet.trials.fencing`); a recorder
        without attempts (no storage) returns."""
        ...


#: builds rank 0's recorder from the trial's spec (given to the runtime by the entry point)
RecorderFactory = Callable[[TrialSpec], Recorder]
