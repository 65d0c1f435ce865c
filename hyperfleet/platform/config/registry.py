"""The one table of schedulers, keyed by their configuration class: :data:`SCHEDULERS` maps each
``scheduler:`` section the sweep file accepts to the builder of its scheduler. The sweep
file's ``scheduler`` union is built from the table's keys (``config/model.py``), so a row here
is what makes a ``type:`` valid, and ``build_scheduler`` (``schedulers/registry.py``) builds
every scheduler through the same row.

The table lives in ``config/``, below the schedulers, so validating a sweep file loads no
scheduling code: a builder is named by its import path (``"package.module:function"``,
imported when a scheduler is first built) or, for a scheduler registered at run time by a
plugin or a test (:func:`hyperfleet.platform.config.model.register_scheduler`), given as the
function itself. A builder takes ``(sweep, storage, create)`` and returns the sweep's
scheduler, handing it only the inputs it takes.

A new scheduler touches 2 files: its module (the scheduler and its builder, in a wing of
``schedulers/``) and this table (its configuration class, a frozen pydantic model with
``type: Literal["name"]``, and its row). An Optuna sampler is instead its configuration in
``config/schedulers.py`` (a member of ``SchedulerConfig``, which gives it its row here) and its
row of ``schedulers/optuna/samplers.py``'s ``SAMPLERS``.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Annotated, Any, TypeAlias

from pydantic import BaseModel, Field

from hyperfleet.platform.config.pbt import PB2Config, PBTConfig
from hyperfleet.platform.config.schedulers import SchedulerConfig

Builder: TypeAlias = Callable[..., Any]
"""``(sweep, storage, create)`` to the sweep's scheduler (``create``: a new sweep)."""

_BUILDERS = "hyperfleet.platform.schedulers.registry"

OPTUNA_CONFIGS: tuple[type[BaseModel], ...] = typing.get_args(typing.get_args(SchedulerConfig)[0])
"""The configurations of ``config/schedulers.py``'s ``SchedulerConfig`` union: each is an Optuna
sampler (``schedulers/optuna/samplers.py``'s ``SAMPLERS`` builds it from its class)."""

SCHEDULERS: dict[type[BaseModel], str | Builder] = {
    **dict.fromkeys(OPTUNA_CONFIGS, f"{_BUILDERS}:optuna_scheduler"),  # tpe, random, grid, ...
    PBTConfig: f"{_BUILDERS}:pbt_scheduler",
    PB2Config: f"{_BUILDERS}:pb2_scheduler",
}
"""Every scheduler, by its configuration class (the module docstring)."""


def scheduler_union() -> Any:
    """The sweep file's ``scheduler:`` section: the table's configurations, by ``type``."""
    return Annotated[typing.Union[tuple(SCHEDULERS)], Field(discriminator="type")]  # noqa: UP007


__all__ = ["OPTUNA_CONFIGS", "SCHEDULERS", "Builder", "scheduler_union"]
