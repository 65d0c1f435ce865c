"""A run's budget given beside the sweep file: ``sweep run --trials N --timeout D`` and
``hyperfleet.run(..., trials=, timeout=)`` (a smoke run of a file written for hours).

Each value is validated as the file's own would be (``budget.trials`` a whole number of 1 or
more; ``budget.timeout`` a duration such as ``90s``, ``30m``, ``2h`` or seconds), each
problem a line naming the option; then it replaces the file's value before the whole sweep is
validated, so the checks that read the budget (a PBT sweep's ``trials`` is its population,
a sweep needs ``trials`` or ``timeout``) see it too, and their lines name the option as well.
Nothing is written before this is done.

**Recorded, not hidden.** A run stores the sweep's configuration as it runs it (a stored
sweep's config is replaced by each run's, :mod:`~hyperfleet.platform.storage.ownership`), so
an overridden budget is the stored budget from then on: ``sweep status`` and ``sweep list``
count against it, and every worker serving the sweep keeps to it. A later run without the
options stores the file's budget again and continues the sweep to it. ``budget.trials``
counts every trial the sweep has run since it was created (``--trials 5`` on a sweep with 8
ended trials runs none); ``budget.timeout`` counts from the start of each run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config.loading import parse_sweep
from hyperfleet.platform.config.model import Budget, SweepConfig

#: how each override is named where it is given: on the command line, in ``hyperfleet.run``
CLI_NAMES = {"trials": "--trials", "timeout": "--timeout"}
API_NAMES = {"trials": "run(trials=...)", "timeout": "run(timeout=...)"}


@dataclass(frozen=True)
class BudgetOverride:
    """The budget values given for a run (None: the file's)."""

    trials: int | None = None
    timeout: float | None = None
    names: Mapping[str, str] | None = None
    """How each is named in a problem's line (:data:`CLI_NAMES`, :data:`API_NAMES`)."""

    def given(self) -> dict[str, Any]:
        return {k: v for k, v in (("trials", self.trials), ("timeout", self.timeout))
                if v is not None}  # fmt: skip

    def __bool__(self) -> bool:
        return bool(self.given())

    def applied(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """The sweep mapping ``data`` with its budget's values replaced by the given ones."""
        budget = data.get("budget")
        merged = {**(budget if isinstance(budget, Mapping) else {}), **self.given()}
        return {**data, "budget": merged}

    def line(self) -> str | None:
        """``budget for this run: trials 3, timeout 120s (the sweep file's replaced; stored
        with the sweep)``; None when nothing is overridden."""
        if not self:
            return None
        units = {"trials": "", "timeout": "s"}
        shown = ", ".join(f"{key} {value:g}{units[key]}" for key, value in self.given().items())
        return f"budget for this run: {shown} (the sweep file's replaced; stored with the sweep)"


def budget_override(
    trials: Any = None, timeout: Any = None, names: Mapping[str, str] = CLI_NAMES
) -> BudgetOverride:
    """The given values validated as the sweep file's ``budget.trials`` and
    ``budget.timeout`` are; ``ConfigError`` with a line per bad one, naming its option."""
    given = {k: v for k, v in (("trials", trials), ("timeout", timeout)) if v is not None}
    problems = []
    for key, value in given.items():
        if isinstance(value, bool):
            problems.append(f"{names[key]}: expected a number, got {value!r}")
            continue
        try:
            Budget.model_validate({key: value})
        except ValidationError as exc:
            msg = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
            shown = "" if repr(value) in msg else f" (got {value!r})"
            problems.append(f"{names[key]}: {msg}{shown}")
    if problems:
        raise ConfigError(problems)
    budget = Budget.model_validate(given)
    return BudgetOverride(budget.trials, budget.timeout, dict(names))


def parse_with(data: Mapping[str, Any], override: BudgetOverride) -> SweepConfig:
    """:func:`~.loading.parse_sweep` of ``data`` with ``override`` applied; a problem with an
    overridden field names its option instead (``--trials: 3 differs from ...``)."""
    if not override:
        return parse_sweep(data)
    names = override.names or CLI_NAMES
    try:
        return parse_sweep(override.applied(data))
    except ConfigError as exc:
        renamed = [_renamed(line, override, names) for line in exc.problems]
        raise ConfigError(renamed) from None


def _renamed(line: str, override: BudgetOverride, names: Mapping[str, str]) -> str:
    for key in override.given():
        field = f"budget.{key}:"
        if line.startswith(field):
            return f"{names[key]}:{line.removeprefix(field)}"
    return line
