"""The search space: sweep-file parameter specs as Optuna distributions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from hyperfleet.platform.config import CategoricalParam, FloatParam, IntParam, ParamSpec


def distribution(spec: ParamSpec) -> BaseDistribution:
    if isinstance(spec, FloatParam):
        return FloatDistribution(spec.low, spec.high, log=spec.log, step=spec.step)
    if isinstance(spec, IntParam):
        return IntDistribution(spec.low, spec.high, log=spec.log, step=spec.step)
    return CategoricalDistribution(spec.choices)


def distributions(space: Mapping[str, ParamSpec]) -> dict[str, BaseDistribution]:
    return {name: distribution(spec) for name, spec in space.items()}


def sample(trial: optuna.Trial, space: Mapping[str, ParamSpec]) -> dict[str, Any]:
    """Ask the trial for every parameter (an already-sampled one keeps its value)."""
    params: dict[str, Any] = {}
    for name, spec in space.items():
        if isinstance(spec, FloatParam):
            params[name] = trial.suggest_float(
                name, spec.low, spec.high, log=spec.log, step=spec.step
            )
        elif isinstance(spec, IntParam):
            params[name] = trial.suggest_int(
                name, spec.low, spec.high, log=spec.log, step=spec.step
            )
        else:
            params[name] = trial.suggest_categorical(name, spec.choices)
    return params


def grid(space: Mapping[str, ParamSpec]) -> dict[str, list[Any]] | None:
    """Every value of each dimension, or None if a dimension is continuous."""
    values: dict[str, list[Any]] = {}
    for name, spec in space.items():
        if isinstance(spec, CategoricalParam):
            values[name] = list(spec.choices)
        elif isinstance(spec, IntParam) and not spec.log:
            values[name] = list(range(spec.low, spec.high + 1, spec.step))
        elif isinstance(spec, FloatParam) and spec.step is not None:
            n = round((spec.high - spec.low) / spec.step)
            values[name] = [spec.low + i * spec.step for i in range(n + 1)]
        else:
            return None
    return values
