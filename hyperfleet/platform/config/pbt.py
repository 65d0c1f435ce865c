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


def branches(spec: Mapping[str, Any]) -> Mapping[str, Mapping[str, Any]]:
    """A categorical's sub-spaces by choice (``choices`` given as a mapping); else empty."""
    choices = spec.get("choices")
    return choices if isinstance(choices, Mapping) else {}


def paths(space: Mapping[str, Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each dimension of the tree with the choices that open it, one mapping per place it
    appears (``{}`` at the top)."""
    out: dict[str, list[dict[str, Any]]] = {}

    def visit(sub: Mapping[str, Mapping[str, Any]], where: dict[str, Any]) -> None:
        for name, spec in sub.items():
            out.setdefault(name, []).append(where)
            for choice, under in branches(spec).items():
                visit(under, {**where, name: choice})

    visit(space, {})
    return out


def flat(space: Mapping[str, Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Every dimension of the tree by name (a conditional space's branches too)."""
    out: dict[str, Mapping[str, Any]] = {}
    for name, spec in space.items():
        out.setdefault(name, spec)
        for under in branches(spec).values():
            for sub_name, sub_spec in flat(under).items():
                out.setdefault(sub_name, sub_spec)
    return out


def check_initial(
    initial: Sequence[Mapping[str, Any]], space: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """What is wrong with ``scheduler.initial`` for ``space`` (the sweep's space as a plain
    mapping, as in :mod:`.mutation`): unknown parameters, values out of bounds or choices, a
    branch's parameter without the choice that opens it."""
    problems = []
    every, opened_by = flat(space), paths(space)
    for i, entry in enumerate(initial):
        for name, value in entry.items():
            path = f"scheduler.initial[{i}].{name}"
            spec = every.get(name)
            if spec is None:
                problems.append(f"{path}: not a parameter of the space ({sorted(every)})")
            elif spec["type"] == "categorical" and value not in list(spec["choices"]):
                problems.append(f"{path}: expected one of {list(spec['choices'])} (got {value!r})")
            elif spec["type"] != "categorical" and not (
                isinstance(value, int | float) and spec["low"] <= value <= spec["high"]
            ):
                problems.append(
                    f"{path}: expected a number in [{spec['low']}, {spec['high']}] (got {value!r})"
                )
            elif not any(all(entry.get(k) == v for k, v in w.items()) for w in opened_by[name]):
                needs = ", ".join(f"{k}: {v}" for k, v in opened_by[name][0].items())
                problems.append(f"{path}: a parameter under {needs}; give {needs} beside it")
    return problems
