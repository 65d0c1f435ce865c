"""``hyperfleet sweep enqueue``: user-chosen points that the sweep runs first (warm start)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config import CategoricalParam, SweepConfig
from hyperfleet.platform.schedulers import build_scheduler
from hyperfleet.platform.storage import Storage


def check_point(cfg: SweepConfig, params: Mapping[str, Any]) -> list[str]:
    """One line per param that is not in the space or outside its range."""
    problems = [
        f"--params.{name}: not in the sweep's space; expected one of {', '.join(cfg.space)}"
        for name in params
        if name not in cfg.space
    ]
    for name, value in params.items():
        spec = cfg.space.get(name)
        if spec is None:
            continue
        if isinstance(spec, CategoricalParam):
            if value not in spec.choices:
                problems.append(f"--params.{name}: {value!r} is not one of {spec.choices}")
        elif not isinstance(value, (int, float)) or not spec.low <= value <= spec.high:
            problems.append(f"--params.{name}: {value!r} is outside [{spec.low}, {spec.high}]")
    return problems


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
        if storage.get_sweep(cfg.name) is None:
            storage.create_sweep(cfg.name, cfg.model_dump(mode="json"))
        scheduler = build_scheduler(cfg, storage, create=True)
        return scheduler.enqueue(params)
    finally:
        storage.close()
