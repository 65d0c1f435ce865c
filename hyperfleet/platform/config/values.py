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
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Iterator
from typing import Any

SWEEP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
"""A sweep's name, matched whole (a trailing newline included)."""
MAX_KEY = 200
_KEY = re.compile(r"[\w./\- :]+")
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
