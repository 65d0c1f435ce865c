"""The one table of schedulers: each scheduler configuration class to the function that builds
its scheduler from a validated sweep and its storage.

A scheduler's configuration is a frozen pydantic model in ``config/`` (validating a sweep file
loads no scheduling code); :data:`SCHEDULERS` maps that class to a builder here, the one place
that reads a ``SweepConfig`` for a scheduler and hands it only the inputs it takes. The
builders import their wing when called, so building PBT loads no Optuna sampler code and the
other way round. ``build_scheduler`` (re-exported by the package) looks the sweep's scheduler
configuration up by its class: the controller, each trial's rank 0, ``sweep enqueue`` and the
contract suite build every scheduler through it.

A new Optuna sampler is its configuration class in ``config/schedulers.py`` (a member of its
``SchedulerConfig`` union, which gives it its row here) and its row of
``schedulers/optuna/samplers.py``'s ``SAMPLERS`` (the sampler built from that configuration).
A new kind of scheduler is its configuration in ``config/`` (joined to the sweep file's
scheduler union in ``config/model.py``), its module in a wing of its own, and one row here.
``tests/platform/schedulers/test_registry.py`` fails while a configuration class of the sweep
file's union has no row.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config.pbt import PB2Config, PBTConfig
from hyperfleet.platform.config.schedulers import SchedulerConfig
from hyperfleet.platform.schedulers.base import Scheduler

if TYPE_CHECKING:
    from hyperfleet.platform.config import SweepConfig
    from hyperfleet.platform.schedulers.pbt.scheduler import PBTScheduler
    from hyperfleet.platform.storage import Storage

Builder: TypeAlias = Callable[["SweepConfig", "Storage", bool], Scheduler]
"""``(sweep, storage, create)`` to the sweep's scheduler (``create``: a new sweep)."""


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


OPTUNA_CONFIGS: tuple[type, ...] = typing.get_args(typing.get_args(SchedulerConfig)[0])
"""The configurations of ``config/schedulers.py``'s ``SchedulerConfig`` union: each is an Optuna
sampler (``schedulers/optuna/samplers.py``'s ``SAMPLERS`` builds it from its class)."""

SCHEDULERS: dict[type, Builder] = {
    **dict.fromkeys(OPTUNA_CONFIGS, optuna_scheduler),  # tpe, random, grid, cmaes, qmc, gp, ...
    PBTConfig: pbt_scheduler,
    PB2Config: pb2_scheduler,
}
"""Every scheduler, by its configuration class (the module docstring)."""


def build_scheduler(cfg: SweepConfig, storage: Storage, create: bool = False) -> Scheduler:
    """The sweep's scheduler, its state in ``storage`` (``create``: make its state if new)."""
    builder = SCHEDULERS.get(type(cfg.scheduler))
    if builder is None:
        raise ConfigError(
            f"scheduler.type: {cfg.scheduler.type!r} has no scheduler registered; add its "
            f"configuration class to SCHEDULERS in hyperfleet/platform/schedulers/registry.py"
        )
    return builder(cfg, storage, create)


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


__all__ = ["OPTUNA_CONFIGS", "SCHEDULERS", "Builder", "build_scheduler", "check_scheduler"]
