"""Configuration of population-based training: ``scheduler: {type: pbt | pb2, ...}``.

Kept apart from the scheduler so that validating a sweep file loads no scheduling code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _PopulationFields(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    population: int = Field(4, ge=2)
    """Members trained together (the sweep's trials)."""
    perturbation_interval: int = Field(100, ge=1)
    """Steps between a member's ready checks (exploit/explore, pause)."""
    burn_in: int = Field(0, ge=0)
    """No member is ready before this step."""
    quantile_fraction: float = Field(0.25, gt=0.0, le=0.5)
    """Bottom fraction that exploits, top fraction that donates."""
    resample_probability: float = Field(0.25, ge=0.0, le=1.0)
    """Probability that explore resamples a parameter from the space instead of perturbing it."""
    perturbation_factors: tuple[Annotated[float, Field(gt=0)], ...] = Field(
        (0.8, 1.2), min_length=1
    )
    """Explore multiplies a float/int parameter by one of these, chosen at random."""
    synchronous: bool = False
    """Wait (paused) at each interval until every member is ready, then exploit."""
    seed: int | None = None
    """Seed of the initial sampling and of explore; None: fresh randomness."""
    initial: tuple[dict[str, Any], ...] = ()
    """Initial params of the first members (missing parameters are sampled)."""

    @model_validator(mode="after")
    def _initial_fits(self) -> _PopulationFields:
        if len(self.initial) > self.population:
            raise ValueError(
                f"initial gives {len(self.initial)} members, more than the population "
                f"({self.population})"
            )
        return self


class PBTConfig(_PopulationFields):
    """Population-based training (``scheduler.type: pbt``)."""

    type: Literal["pbt"]


class PB2Config(_PopulationFields):
    """Population-based bandits (``scheduler.type: pb2``): PBT with a GP-UCB explore."""

    type: Literal["pb2"]
    ucb_kappa: float = Field(2.0, ge=0.0)
    """Weight of the GP's standard deviation in the upper confidence bound (exploration)."""
    n_candidates: int = Field(256, ge=8)
    """Random points at which the acquisition is evaluated."""
    window: int = Field(64, ge=4)
    """The most recent (time, hyperparameters, improvement) points given to the GP."""
    min_observations: int = Field(4, ge=1)
    """Below this many points, explore perturbs at random as PBT does."""


def check_initial(
    initial: Sequence[Mapping[str, Any]], space: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """What is wrong with ``scheduler.initial`` for ``space`` (the sweep's space as a plain
    mapping, as in :mod:`.mutation`): unknown parameters, values out of bounds or choices."""
    problems = []
    for i, entry in enumerate(initial):
        for name, value in entry.items():
            path = f"scheduler.initial[{i}].{name}"
            spec = space.get(name)
            if spec is None:
                problems.append(f"{path}: not a parameter of the space ({sorted(space)})")
            elif spec["type"] == "categorical" and value not in list(spec["choices"]):
                problems.append(f"{path}: expected one of {list(spec['choices'])} (got {value!r})")
            elif spec["type"] != "categorical" and not (
                isinstance(value, int | float) and spec["low"] <= value <= spec["high"]
            ):
                problems.append(
                    f"{path}: expected a number in [{spec['low']}, {spec['high']}] (got {value!r})"
                )
    return problems
