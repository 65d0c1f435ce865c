"""Raw ``scheduler:`` and ``pruner:`` mappings validated into their typed configuration.

``parse_scheduler_config`` / ``parse_pruner_config`` validate raw mappings and turn pydantic's
errors into a :class:`~hyperfleet.errors.ConfigError` with one line per problem, each naming the
field path (``scheduler.acq_func``), the bad value and what is expected.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter, ValidationError

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config.schedulers import PrunerConfig, SchedulerConfig

_TYPE_NAMES = frozenset({"int", "float", "str", "bool", "none"})


def _field_path(loc: tuple[Any, ...], prefix: str) -> str:
    # The discriminated union puts the chosen tag first ("skopt", "acq_func"), and a union
    # field adds one segment per member ("literal['auto']", "constrained-int"): drop both.
    parts = [
        str(p)
        for p in loc[1:]
        if isinstance(p, int) or (str(p).isidentifier() and str(p) not in _TYPE_NAMES)
    ]
    return ".".join([prefix, *parts])


def validation_problems(exc: ValidationError, prefix: str) -> list[str]:
    """One line per bad field: ``prefix.field: what is expected (got value)``."""
    by_path: dict[str, tuple[list[str], str]] = {}
    for err in exc.errors():
        kind = err["type"]
        msg = err["msg"].removeprefix("Value error, ")
        if kind == "union_tag_not_found":
            path, msg, got = f"{prefix}.type", "missing; it names the type", ""
        elif kind == "union_tag_invalid":
            ctx = err.get("ctx", {})
            path = f"{prefix}.type"
            msg = f"unknown type, expected one of {ctx.get('expected_tags', '')}"
            got = f" (got {ctx.get('tag')!r})"
        else:
            path = _field_path(err["loc"], prefix)
            got = "" if kind == "missing" else f" (got {err.get('input')!r})"
        msgs, _ = by_path.setdefault(path, ([], got))
        if msgs and msg[:1].isupper():
            msg = msg[0].lower() + msg[1:]
        if msg not in msgs:
            msgs.append(msg)
    return [f"{path}: {' or '.join(msgs)}{got}" for path, (msgs, got) in by_path.items()]


_SCHEDULER_ADAPTER: TypeAdapter[Any] = TypeAdapter(SchedulerConfig)
_PRUNER_ADAPTER: TypeAdapter[Any] = TypeAdapter(PrunerConfig)


def parse_scheduler_config(raw: Mapping[str, Any], prefix: str = "scheduler") -> Any:
    """Validate ``raw`` as a ``SchedulerConfig``; raise ConfigError naming every bad field."""
    try:
        return _SCHEDULER_ADAPTER.validate_python(dict(raw))
    except ValidationError as exc:
        raise ConfigError(validation_problems(exc, prefix)) from None


def parse_pruner_config(raw: Mapping[str, Any], prefix: str = "pruner") -> Any:
    """Validate ``raw`` as a ``PrunerConfig``; raise ConfigError naming every bad field."""
    try:
        return _PRUNER_ADAPTER.validate_python(dict(raw))
    except ValidationError as exc:
        raise ConfigError(validation_problems(exc, prefix)) from None
