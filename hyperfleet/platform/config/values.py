"""Values of a sweep file that must be safe to keep: names and numbers.

Names become file names (the sweep's folder), Optuna and MLflow keys (``space.lr``,
``fixed.batch_size``, the objective's metric) and log lines. A sweep name follows the platform's
own rule (:data:`SWEEP_NAME`); a parameter or metric name follows MLflow's rule for its keys
(letters, digits, ``_ . - / :`` and spaces, no ``..`` or ``//``, at most :data:`MAX_KEY`
characters), so it can't fail at run time when MLflow refuses it. Any other name (an experiment,
a pool, the working directory) may hold anything but a control character: a newline in a name
splits a log line, or names a different file than the one shown.

Numbers must be finite: a sweep file is stored as JSON, which has no NaN or Infinity (PostgreSQL
refuses them), and a bound or choice that is NaN makes every comparison false. YAML writes them as
``.nan`` and ``.inf``, and pydantic reads the strings ``nan`` and ``inf`` as floats, so the
check walks the validated config (:func:`finite_problems`), not the text.

Finite is not enough: numbers must also fit what the samplers and the storage hold
(:func:`range_problems`, limits tried against the real components):

- a float dimension's width ``high - low`` must be finite: numpy's ``uniform`` (every Optuna
  sampler draws through it) raises ``OverflowError: Range exceeds valid bounds`` for
  ``low: -1e308, high: 1e308``, although both bounds are finite; a stepped float's count of
  steps ``(high - low) / step`` likewise.
- an int dimension's bounds must be within +-2**53 (:data:`MAX_EXACT_INT`): Optuna keeps every
  param in its float representation (``IntDistribution.to_internal_repr``, the float
  ``param_value`` column), where ints beyond 2**53 are no longer exact, so a sampled int could
  round past its bound. A categorical's int choices are stored by index and are not limited.
- a scheduler that enumerates each value of a discrete dimension (an int, a stepped float)
  holds at most :data:`MAX_ENUMERATED` values of one: Optuna's GP sampler builds an array of
  all of them at each suggestion (2**24 values peaked at 256 MiB; an int over [1, 2**40]
  asked for 8 TiB, 2**31 for 32 GiB), and ``grid`` lists them.
- a step count (``trial.steps``, ``eval_every``, ``checkpoint.every``) must fit PostgreSQL's
  ``integer`` step columns (:data:`MAX_STEP`, 2**31 - 1): a report
  at a later step fails there.
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Iterator
from typing import Any

from hyperfleet.spec.trial import MAX_STEP

SWEEP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
"""A sweep's name, matched whole (a trailing newline included)."""
MAX_KEY = 200
_KEY = re.compile(r"[\w./\- :]+")
MAX_EXACT_INT = 2**53
"""The largest int bound of a dimension: Optuna holds params as floats, exact up to 2**53."""
MAX_ENUMERATED = 2**24
"""The most values of one discrete dimension under a scheduler that enumerates them."""
ENUMERATING = ("gp", "grid")
"""The schedulers that enumerate every value of a discrete dimension."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def control_problem(value: str) -> str | None:
    """Why a free-form name can't be used (it holds a control character), or None."""
    if _CONTROL.search(value):
        return f"{value!r} holds a control character; remove it"
    return None


def key_problem(name: Any) -> str | None:
    """Why ``name`` can't be a parameter or metric name (MLflow's rule), or None."""
    if not isinstance(name, str):
        return f"{name!r} is a {type(name).__name__}; give a name (quote it in YAML)"
    if (
        len(name) > MAX_KEY
        or not _KEY.fullmatch(name)
        or posixpath.normpath(name) != name
        or name.startswith(("/", ".."))
    ):
        return (
            f"{name!r} is not a usable name; use letters, digits, '_', '.', '-', '/', ':' or "
            f"spaces (1-{MAX_KEY} characters, no '..' or '//')"
        )
    return None


def shown(key: Any) -> str:
    """A key as a field path shows it: as written, or quoted when it isn't printable."""
    text = str(key)
    return text if text.isprintable() else repr(text)


def _floats(value: Any, path: str) -> Iterator[tuple[str, float]]:
    if isinstance(value, float):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _floats(item, f"{path}.{shown(key)}" if path else shown(key))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _floats(item, f"{path}[{i}]")


def finite_problems(data: Any) -> list[str]:
    """One line per NaN or infinity in ``data`` (a config as a dict), naming its path."""
    return [
        f"{path}: {value} is not a finite number; give a real number"
        for path, value in _floats(data, "")
        if not math.isfinite(value)
    ]


def _dimension_problems(path: str, spec: dict[str, Any]) -> list[str]:
    low: Any = spec.get("low")
    high: Any = spec.get("high")
    step: Any = spec.get("step")
    if spec.get("type") == "float":
        if not math.isfinite(high - low):
            return [
                f"{path}: high - low overflows a float ({low} to {high}); the samplers draw "
                f"within that width: narrow the range (or use log: true for positive bounds)"
            ]
        if step is not None and not math.isfinite((high - low) / step):
            return [
                f"{path}.step: (high - low) / step overflows a float ({step}); use a larger "
                f"step or a narrower range"
            ]
    if spec.get("type") == "int":
        return [
            f"{path}.{bound}: {value} is beyond +-2**53 ({MAX_EXACT_INT}), past which the "
            f"samplers' float representation is not exact; use a smaller {bound} (or a float "
            f"dimension)"
            for bound, value in (("low", low), ("high", high))
            if abs(value) > MAX_EXACT_INT
        ]
    return []


def _count(spec: dict[str, Any]) -> int | None:
    """How many values a discrete dimension has (None: continuous or categorical)."""
    low: Any = spec.get("low")
    high: Any = spec.get("high")
    step: Any = spec.get("step")
    if spec.get("type") == "int":
        return int((high - low) // (step or 1) + 1)
    if spec.get("type") == "float" and step is not None:
        return round((high - low) / step) + 1
    return None


def _enumerated_problems(path: str, spec: dict[str, Any], scheduler: str) -> list[str]:
    count = _count(spec)
    if count is None or count <= MAX_ENUMERATED:
        return []
    return [
        f"{path}: {count} values, which scheduler {scheduler!r} enumerates (at most "
        f"{MAX_ENUMERATED}); give a larger step, a float dimension, or another scheduler"
    ]


def _dimensions(space: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, spec in space.items():
        at = f"{path}.{shown(name)}"
        yield at, spec
        choices = spec.get("choices")
        if isinstance(choices, dict):
            for choice, sub in choices.items():
                yield from _dimensions(sub or {}, f"{at}.choices.{shown(choice)}")


def range_problems(data: dict[str, Any]) -> list[str]:
    """One line per bound or step count the samplers or the storage can't hold (see the module
    docstring), naming its path; ``data`` is a validated config as a dict."""
    scheduler = str((data.get("scheduler") or {}).get("type"))
    problems: list[str] = []
    for at, spec in _dimensions(data["space"], "space"):
        found = _dimension_problems(at, spec)
        if not found and scheduler in ENUMERATING:
            found = _enumerated_problems(at, spec, scheduler)
        problems += found
    trial = data["trial"]
    counts = (
        ("trial.steps", trial["steps"]),
        ("trial.eval_every", trial["eval_every"]),
        ("trial.checkpoint.every", (trial.get("checkpoint") or {}).get("every")),
    )
    return problems + [
        f"{path}: {value} is beyond the storage's step column (PostgreSQL integer, at most "
        f"{MAX_STEP}); use at most {MAX_STEP} steps"
        for path, value in counts
        if value is not None and value > MAX_STEP
    ]
