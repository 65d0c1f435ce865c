"""What a trial's record says about how it ended: :func:`reported` (its last report's
objectives, finite or the trial failed) and :func:`failed` (a failed launch: retried or not);
with a finite objective, the exception its log ends with, as plain text.

A trial's log is written for a terminal: torch's ``weights_only`` errors are bold, progress
bars rewrite their line with carriage returns. :func:`plain` removes ECMA-48 escape sequences (CSI
``ESC [ ... final``, OSC ``ESC ] ... BEL|ST``, the two-byte ``ESC X`` forms, and their 8-bit
C1 equivalents) and the other control characters but tab and newline, so a stored error, its
MLflow tag and ``sweep status`` show the words alone and cannot drive a reader's terminal."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from hyperfleet.platform.config import Objective
from hyperfleet.platform.storage import TrialRecord
from hyperfleet.platform.storage.failures import raised
from hyperfleet.spec.states import Outcome, TrialState

_ESCAPES = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves
    r"|(?:\x1b\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC: titles, links
    r"|\x1b[PX^_][^\x1b\x9c]*(?:\x1b\\|\x9c)?"  # DCS, SOS, PM, APC strings
    r"|\x1b[ -/]*[0-~]"  # the other escape sequences
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"  # control characters but tab and newline
)


def finite(value: object) -> float | None:
    """``value`` as a finite float, or None (NaN, infinities, stored as strings or not)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def plain(text: str) -> str:
    """``text`` without terminal escape sequences and control characters (see above)."""
    return _ESCAPES.sub("", text)


Ended = tuple[TrialState | None, list[float] | None, str]
"""A launch's end: state (None: paused, WAITING: retried), objective values, error text."""


def reported(rec: TrialRecord, objectives: Sequence[Objective]) -> Ended:
    """The end of a launch that exited cleanly with outcome ``rec.outcome``: PRUNED, paused,
    COMPLETE with its objectives' values, or FAIL when one is missing or not finite."""
    if rec.outcome == Outcome.PRUNED:
        return TrialState.PRUNED, None, ""
    if rec.outcome == Outcome.PAUSED:
        return None, None, ""
    missing = [o.metric for o in objectives if o.metric not in rec.metrics]
    if missing:
        have = ", ".join(sorted(rec.metrics)) or "none"
        return (
            TrialState.FAIL,
            None,
            f"objective metric {', '.join(missing)} not in the last report "
            f"(reported: {have}); report it or fix objective.metric",
        )
    values = [finite(rec.metrics[o.metric]) for o in objectives]
    bad = [
        f"{o.metric} = {rec.metrics[o.metric]}"
        for o, v in zip(objectives, values, strict=True)
        if v is None
    ]
    if bad:
        return (
            TrialState.FAIL,
            None,
            f"objective {', '.join(bad)} at step {rec.last_step} is not a finite number; "
            f"the trial failed (check the workload for divergence)",
        )
    return TrialState.COMPLETE, [float(v) for v in values if v is not None], ""


CAUSE_LINES = 400
"""How far up a failed launch's log its exception line is looked for: below a multi-rank
trial's tracebacks torchrun's agent prints its own, and a table per failed rank."""


def failed(
    rec: TrialRecord, code: int, tail: str, max_retries: int, log: str | None = None
) -> tuple[TrialState, None, str]:
    """A failed launch (exit ``code``, its log ending in plain ``tail``, of which ``log`` is
    more, up to :data:`CAUSE_LINES`): retried (WAITING) while retries are left and it did not
    raise the same exception as the trial's previous failure; else FAIL. The error is
    ``exit code N`` and ``tail``, then the exception line when it is above ``tail``, so that
    the error's last exception line is the launch's
    (:func:`~hyperfleet.platform.storage.failures.reason`)."""
    error = f"exit code {code}\n{tail}"
    this = raised(log or tail)
    if this is not None and raised(tail) != this:  # above the quoted lines: said last
        error += f"\n{this}"
    before = raised(rec.error or "")
    if int(rec.retries or 0) >= max_retries:
        return TrialState.FAIL, None, error
    if this is not None and this == before:
        return TrialState.FAIL, None, f"raised the same error twice: {this}\n{error}"
    return TrialState.WAITING, None, error
