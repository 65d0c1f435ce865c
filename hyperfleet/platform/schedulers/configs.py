"""Typed configuration of the schedulers and pruners (the ``scheduler:`` and ``pruner:`` keys).

Each scheduler type is one frozen pydantic model; ``SchedulerConfig`` is their union,
discriminated by ``type``, so an unknown type or a misspelt option is an error naming the field.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TPEConfig(_Frozen):
    type: Literal["tpe"]
    seed: int | None = None
    n_startup_trials: int = Field(10, ge=0)


class RandomConfig(_Frozen):
    type: Literal["random"]
    seed: int | None = None


class GridConfig(_Frozen):
    """Exhaustive grid; every dimension of the space must be categorical or give ``step``."""

    type: Literal["grid"]
    seed: int | None = None


SchedulerConfig = Annotated[TPEConfig | RandomConfig | GridConfig, Field(discriminator="type")]


class NoPrunerConfig(_Frozen):
    type: Literal["none"] = "none"


PrunerConfig = Annotated[NoPrunerConfig, Field(discriminator="type")]
