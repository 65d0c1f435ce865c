"""The builders of the built-in schedulers and ``build_scheduler``, which builds the sweep's
scheduler through the one table of schedulers keyed by their configuration class
(``config/registry.py``'s ``SCHEDULERS``, re-exported here).

A builder is the one place that reads a ``SweepConfig`` for its scheduler and hands it only the
inputs it takes. The builders import their wing when called, so building PBT loads no Optuna
sampler code and the other way round. The controller, each trial's rank 0, ``sweep enqueue``
and the contract suite build every scheduler through ``build_scheduler``. A new scheduler's
builder lives in its own module, named by its row of the table (see ``config/registry.py``);
``tests/platform/schedulers/test_registry.py`` fails while a row names no builder.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, cast

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config.registry import OPTUNA_CONFIGS, SCHEDULERS, Builder
from hyperfleet.platform.schedulers.base import Scheduler

if TYPE_CHECKING:
    from hyperfleet.platform.config import SweepConfig
    from hyperfleet.platform.schedulers.pbt.scheduler import PBTScheduler
    from hyperfleet.platform.storage import Storage


def optuna_scheduler(cfg: SweepConfig, storage: Storage, create: bool) -> Scheduler:
    """An Optuna study's sampler and pruner (``schedulers/optuna/``)."""
    from hyperfleet.platform.schedulers.optuna.samplers import build_pruner, first_report
    from hyperfleet.platform.schedulers.optuna.scheduler import OptunaScheduler, open_study

    study = open_study(
        cfg.name,
        storage.optuna,
        cfg.scheduler,
        space=cfg.space,
        modes=[o.mode for o in cfg.all_objectives],
        trials=cfg.budget.trials,
        pruner=build_pruner(cfg.pruner, first_report(cfg.trial), cfg.trial.steps),
        create=create,
    )
    return OptunaScheduler(
        cfg.scheduler,
        study,
        space=cfg.space,
        metrics=[o.metric for o in cfg.all_objectives],
        steps=cfg.trial.steps,
        trials=cfg.budget.trials,
        pruner=cfg.pruner.type,
    )


def _population(cls: type[PBTScheduler], cfg: SweepConfig, storage: Storage) -> Scheduler:

    objective = cfg.all_objectives[0]
    return cls(
        cfg.scheduler,
        store=storage.population,
        sweep=cfg.name,
        space={name: spec.model_dump() for name, spec in cfg.space.items()},
        metric=objective.metric,
        mode=objective.mode,
        max_steps=cfg.trial.length,  # a population's trials have steps (validation)
        max_concurrent=cfg.budget.max_concurrent,
    )


def pbt_scheduler(cfg: SweepConfig, storage: Storage, create: bool) -> Scheduler:
    """Population-based training over storage's population (``schedulers/pbt/``)."""
    from hyperfleet.platform.schedulers.pbt.scheduler import PBTScheduler

    return _population(PBTScheduler, cfg, storage)


def pb2_scheduler(cfg: SweepConfig, storage: Storage, create: bool) -> Scheduler:
    """PB2: PBT whose explore is a GP bandit (``schedulers/pbt/pb2.py``)."""
    from hyperfleet.platform.schedulers.pbt.pb2 import PB2Scheduler

    return _population(PB2Scheduler, cfg, storage)


def build_scheduler(cfg: SweepConfig, storage: Storage, create: bool = False) -> Scheduler:
    """The sweep's scheduler, its state in ``storage`` (``create``: make its state if new)."""
    row = SCHEDULERS.get(type(cfg.scheduler))
    if row is None:
        raise ConfigError(
            f"scheduler.type: {cfg.scheduler.type!r} has no scheduler registered; add its "
            f"configuration class to SCHEDULERS in hyperfleet/platform/config/registry.py"
        )
    builder = resolve(row)
    return cast(Scheduler, builder(cfg, storage, create))


def resolve(row: str | Builder) -> Builder:
    """A row's builder: the function itself, or the one its ``"package.module:function"``
    names, imported now."""
    if callable(row):
        return row
    module, _, name = row.partition(":")
    return cast(Builder, getattr(importlib.import_module(module), name))


def check_scheduler(cfg: SweepConfig) -> None:
    """Build what the sweep's scheduler builds from its configuration alone (an Optuna
    sampler and pruner; a population's checks are the sweep file's validation), so that
    what it refuses (``ConfigError``) is refused before any of the sweep is stored: by
    ``hyperfleet validate`` and by every door that runs or submits a sweep."""
    if type(cfg.scheduler) in OPTUNA_CONFIGS:
        from hyperfleet.platform.schedulers.optuna.samplers import build_pruner, first_report
        from hyperfleet.platform.schedulers.optuna.scheduler import study_sampler

        study_sampler(
            cfg.scheduler,
            space=cfg.space,
            n_objectives=len(cfg.all_objectives),
            trials=cfg.budget.trials,
        )
        build_pruner(cfg.pruner, first_report(cfg.trial), cfg.trial.steps)


__all__ = [
    "OPTUNA_CONFIGS",
    "SCHEDULERS",
    "Builder",
    "build_scheduler",
    "check_scheduler",
    "resolve",
]
