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

__all__ = ["MAX_STEP", "ReportValueError", "check_step"]

from hyperfleet.spec.trial import MAX_STEP


class ReportValueError(ValueError):
    """``ctx.report`` was given something that is not a real number; nothing was kept."""


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
