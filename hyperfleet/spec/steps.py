"""The steps a report may carry: what every backend's storage holds.

A step is an int from 0 to :data:`MAX_STEP`: 2**31 - 1 is PostgreSQL's ``integer``, the type
of the platform's step columns (``hf_trials.last_step`` and the others) and of Optuna's
``trial_intermediate_values.step``. PostgreSQL refuses a larger step and SQLite keeps it, so
it is refused before either sees it, on every backend; a negative step is no step.
:func:`check_step` is the one check, for ``ctx.report`` (through
:func:`hyperfleet.trials.values.metric_values`) and for a script trial's reports (its
runner, which imports neither torch nor NumPy: hence this module of its own).
"""

from __future__ import annotations

__all__ = [
    "MAX_STEP",
    "ObjectiveMissingError",
    "ReportValueError",
    "check_step",
    "missing_objective",
]

import difflib
from collections.abc import Collection, Sequence

from hyperfleet.spec.trial import MAX_STEP


class ReportValueError(ValueError):
    """``ctx.report`` was given something that is not a real number; nothing was kept."""


class ObjectiveMissingError(ReportValueError):
    """A trial's first report lacks an objective metric (:func:`missing_objective`): the
    trial fails at that report, nothing of it kept, instead of training to its end."""


def missing_objective(objectives: Sequence[str], reported: Collection[str]) -> str | None:
    """Why a trial's first report, carrying the metrics ``reported`` (in their order), cannot
    be its first: it lacks an objective; the line names what it reported and the closest
    name. None when it carries every objective."""
    missing = [o for o in objectives if o not in reported]
    if not missing:
        return None
    names = ", ".join(repr(m) for m in missing)
    noun = "metric" if len(missing) == 1 else "metrics"
    close = difflib.get_close_matches(missing[0], [str(r) for r in reported], n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return (
        f"objective {noun} {names} not in the first report (reported: "
        f"{', '.join(reported) or 'nothing'}); {hint}report it from the first report on, or "
        f"fix objective.metric"
    )


def check_step(step: int, where: str = "ctx.report") -> int:
    """``step`` if the storage holds it (0 to :data:`MAX_STEP`); else :class:`ReportValueError`
    saying so, after ``where`` (who reported it)."""
    if 0 <= step <= MAX_STEP:
        return step
    text = str(step)
    shown = text if len(text) <= 20 else f"{text[:5]}… ({len(text.lstrip('-'))} digits)"
    raise ReportValueError(
        f"{where}: step {shown} is outside 0..{MAX_STEP}, the steps the storage holds; "
        f"report a step in that range"
    )
