"""``hyperfleet sweep enqueue``: user-chosen points that the sweep runs first (warm start)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config import CategoricalParam, IntParam, ParamSpec, SweepConfig, active
from hyperfleet.platform.schedulers import build_scheduler
from hyperfleet.platform.storage import Storage


def check_point(cfg: SweepConfig, params: Mapping[str, Any]) -> list[str]:
    """One line per param that is not in the space, outside its range, or under a choice
    that the point does not take."""
    every = cfg.dims
    problems = [
        f"--params.{name}: not in the sweep's space; expected one of {', '.join(every)}"
        for name in params
        if name not in every
    ]
    opened = active(cfg.space, params)
    for name, value in params.items():
        spec = every.get(name)
        if spec is None:
            continue
        if name not in opened:
            problems.append(
                f"--params.{name}: under a choice the point does not take; give that choice "
                f"or drop {name}"
            )
        else:
            problem = value_problem(f"--params.{name}", spec, value)
            if problem is not None:
                problems.append(problem)
    return problems


def value_problem(label: str, spec: ParamSpec, value: Any) -> str | None:
    """The line refusing ``value`` for a param of ``spec`` (a choice it lacks, not a number of
    the param's type, outside its range), or None when it fits; ``label`` starts the line."""
    if isinstance(spec, CategoricalParam):
        return None if value in spec.values else f"{label}: {value!r} is not one of {spec.values}"
    kind = "an int" if isinstance(spec, IntParam) else "a float"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{label}: {value!r} is not a number; expected {kind} in [{spec.low}, {spec.high}]"
    if isinstance(spec, IntParam) and value != int(value):
        return f"{label}: {value!r} is not an int; expected {kind} in [{spec.low}, {spec.high}]"
    if not spec.low <= value <= spec.high:
        return f"{label}: {value!r} is outside [{spec.low}, {spec.high}]"
    return None


def enqueue(cfg: SweepConfig, storage_url: str, params: Mapping[str, Any]) -> int:
    """Create the sweep if new, queue ``params`` first; returns the trial number."""
    if cfg.is_population:
        raise ConfigError(
            "scheduler.type: PBT starts from scheduler.initial; enqueue is for "
            "Optuna-based schedulers"
        )
    problems = check_point(cfg, params)
    if problems:
        raise ConfigError(problems)
    storage = Storage(storage_url)
    try:
        if storage.sweeps.get(cfg.name) is None:
            storage.sweeps.create(cfg.name, cfg.model_dump(mode="json"))
        scheduler = build_scheduler(cfg, storage, create=True)
        return scheduler.enqueue(params)
    finally:
        storage.close()
