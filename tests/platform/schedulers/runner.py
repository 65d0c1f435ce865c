"""Run a scheduler config against a known function and return the best value found.

The one place the tests (and ``benchmarks/``) turn a scheduler config into finished trials.
Today it is ``optuna.create_study(...).optimize`` with the sampler from ``build_sampler``; the
platform's in-process trials can replace its body without touching the tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import optuna
from pydantic import TypeAdapter

from hyperfleet.platform.schedulers.configs import SchedulerConfig
from hyperfleet.platform.schedulers.samplers import build_sampler
from hyperfleet.platform.schedulers.testfunctions import KnownFunction

_ADAPTER: TypeAdapter[Any] = TypeAdapter(SchedulerConfig)


def scheduler_config(raw: Mapping[str, Any]) -> Any:
    """A validated SchedulerConfig from a plain mapping (as in a sweep file)."""
    return _ADAPTER.validate_python(dict(raw))


def best_value(cfg: Any, fn: KnownFunction, n_trials: int) -> float:
    """Minimise ``fn`` over its box with the scheduler ``cfg`` for ``n_trials`` trials."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=build_sampler(cfg), direction="minimize")

    def objective(trial: optuna.Trial) -> float:
        x = [trial.suggest_float(f"x{i}", lo, hi) for i, (lo, hi) in enumerate(fn.bounds)]
        return fn.fn(x)

    study.optimize(objective, n_trials=n_trials)
    return float(study.best_value)
