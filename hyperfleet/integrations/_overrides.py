"""The user's own Trainer arguments merged into what a trial's callback sets
(``trainer_kwargs(**overrides)``, ``training_args(**overrides)``): an argument the trial controls
is refused with one line naming it and where the sweep file sets it; any other wins over the
callback's default; ``callbacks`` are the user's plus the callback."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hyperfleet.errors import ConfigError


def merge(
    method: str,
    ours: Mapping[str, Any],
    overrides: Mapping[str, Any],
    controlled: Mapping[str, str],
    callback: object | None = None,
) -> dict[str, Any]:
    """``ours`` with ``overrides`` on top. ``controlled`` maps each argument the trial sets to
    where the sweep file sets it; one of them in ``overrides`` is refused unless it equals ours.
    ``callback``: added to the user's ``callbacks`` when they pass some (once)."""
    for name, value in overrides.items():
        if name in controlled and not _same(value, ours.get(name)):
            raise ConfigError(
                f"{method}({name}={value!r}): the trial sets it ({controlled[name]}); "
                f"drop the argument"
            )
    merged = {**ours, **overrides}
    if callback is not None and "callbacks" in overrides:
        users = list(overrides["callbacks"] or [])
        merged["callbacks"] = users if any(c is callback for c in users) else [*users, callback]
    return merged


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except (TypeError, ValueError, RuntimeError):  # an == that answers no single bool
        return a is b
