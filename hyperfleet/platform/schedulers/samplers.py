"""Build Optuna samplers and pruners from their typed configuration."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import optuna

from hyperfleet.platform.schedulers.configs import (
    GridConfig,
    NoPrunerConfig,
    PrunerConfig,
    RandomConfig,
    SchedulerConfig,
    TPEConfig,
)


def build_sampler(
    cfg: SchedulerConfig,
    grid: Mapping[str, Sequence[Any]] | None = None,
    n_objectives: int = 1,
) -> optuna.samplers.BaseSampler:
    """The Optuna sampler for ``cfg``. ``grid`` is the space's grid (needed by ``grid``)."""
    if isinstance(cfg, TPEConfig):
        return optuna.samplers.TPESampler(
            seed=cfg.seed, n_startup_trials=cfg.n_startup_trials, constant_liar=True
        )
    if isinstance(cfg, RandomConfig):
        return optuna.samplers.RandomSampler(seed=cfg.seed)
    if isinstance(cfg, GridConfig):
        assert grid is not None, "grid sampler needs the space's grid"
        return optuna.samplers.GridSampler(dict(grid), seed=cfg.seed)
    raise AssertionError(f"unhandled scheduler config {cfg!r}")


def build_pruner(cfg: PrunerConfig) -> optuna.pruners.BasePruner:
    if isinstance(cfg, NoPrunerConfig):
        return optuna.pruners.NopPruner()
    raise AssertionError(f"unhandled pruner config {cfg!r}")
