"""The search space: sweep-file parameter specs as Optuna distributions, sampled define-by-run.

A conditional space (sub-spaces under a categorical's choices,
:mod:`hyperfleet.platform.config.space`) is sampled as Optuna's define-by-run examples do: the
trial is asked ``suggest_categorical`` for the choice, then ``suggest_*`` for the chosen
branch's dimensions only, so the others never become params of the trial. A grid over such a
space is the list of its *cells*: one complete assignment per path through the branch tree
(:func:`cells`), served by ``samplers.BranchGridSampler``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from hyperfleet.platform.config import CategoricalParam, FloatParam, IntParam, ParamSpec, walk


def distribution(spec: ParamSpec) -> BaseDistribution:
    if isinstance(spec, FloatParam):
        return FloatDistribution(spec.low, spec.high, log=spec.log, step=spec.step)
    if isinstance(spec, IntParam):
        return IntDistribution(spec.low, spec.high, log=spec.log, step=spec.step)
    return CategoricalDistribution(spec.values)


def distributions(space: Mapping[str, ParamSpec]) -> dict[str, BaseDistribution]:
    return {name: distribution(spec) for name, spec in space.items()}


def _suggest(trial: optuna.Trial, name: str, spec: ParamSpec) -> Any:
    if isinstance(spec, FloatParam):
        return trial.suggest_float(name, spec.low, spec.high, log=spec.log, step=spec.step)
    if isinstance(spec, IntParam):
        return trial.suggest_int(name, spec.low, spec.high, log=spec.log, step=spec.step)
    return trial.suggest_categorical(name, spec.values)


def sample(trial: optuna.Trial, space: Mapping[str, ParamSpec]) -> dict[str, Any]:
    """Ask the trial for every parameter of the branches it takes (an already-sampled one
    keeps its value)."""
    return walk(space, lambda name, spec: _suggest(trial, name, spec))


def _values(spec: ParamSpec) -> list[Any] | None:
    """Every value of one dimension, or None if it is continuous."""
    if isinstance(spec, CategoricalParam):
        return spec.values
    if isinstance(spec, IntParam) and not spec.log:
        return list(range(spec.low, spec.high + 1, spec.step))
    if isinstance(spec, FloatParam) and spec.step is not None:
        n = round((spec.high - spec.low) / spec.step)
        return [spec.low + i * spec.step for i in range(n + 1)]
    return None


def grid(space: Mapping[str, ParamSpec]) -> dict[str, list[Any]] | None:
    """Every value of each dimension, or None if a dimension is continuous."""
    values: dict[str, list[Any]] = {}
    for name, spec in space.items():
        found = _values(spec)
        if found is None:
            return None
        values[name] = found
    return values


def _options(name: str, spec: ParamSpec) -> list[dict[str, Any]] | None:
    found = _values(spec)
    if found is None:
        return None
    if not isinstance(spec, CategoricalParam) or not spec.branches:
        return [{name: v} for v in found]
    out: list[dict[str, Any]] = []
    for choice in spec.values:
        under = cells(spec.branches[str(choice)])
        if under is None:
            return None
        out += [{name: choice, **cell} for cell in under]
    return out


def cells(space: Mapping[str, ParamSpec]) -> list[dict[str, Any]] | None:
    """A conditional space's grid: each path through its branch tree crossed with every value
    of the dimensions on it, as complete params; None if a dimension is continuous."""
    per_dim = [_options(name, spec) for name, spec in space.items()]
    if any(o is None for o in per_dim):
        return None
    return [
        {k: v for part in combo for k, v in part.items()}
        for combo in itertools.product(*(o for o in per_dim if o is not None))
    ]
