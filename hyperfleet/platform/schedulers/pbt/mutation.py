"""PBT's explore step over a search space: sampling and perturbing hyperparameters.

The space is a plain mapping ``name -> spec`` (``{"type": "float", "low", "high", "log",
"step"}``, ``int`` likewise, ``{"type": "categorical", "choices"}``), as the sweep file's
``space`` dumps to. A float or int is either resampled (with ``resample_probability``) or
multiplied by one of ``perturbation_factors`` (in log space when the dimension is log-scaled),
clipped to its bounds and rounded to its step; a categorical moves to a neighbouring choice or
is resampled.

In a conditional space (a categorical's ``choices`` as ``{choice: sub-space}``) a member stays
inside a valid branch: sampling follows the chosen branch only; explore perturbs the chosen
branch's params when the choice stays, and when it moves to another choice the new branch's
sub-space is sampled afresh and the old branch's params are dropped.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

from hyperfleet.platform.config.pbt import branches, flat

PlainSpace = Mapping[str, Mapping[str, Any]]
"""The space as the stored config holds it: each param's spec a plain mapping (not
``config/space.py``'s ``Space`` of pydantic models)."""


def _quantise(value: float, spec: Mapping[str, Any]) -> float:
    step = spec.get("step")
    low, high = spec["low"], spec["high"]
    if step:
        value = low + round((value - low) / step) * step
    return min(max(value, low), high)


def sample_value(spec: Mapping[str, Any], rng: random.Random) -> Any:
    """One value drawn from ``spec`` (uniform, log-uniform for ``log``)."""
    if spec["type"] == "categorical":
        return rng.choice(list(spec["choices"]))
    low, high = spec["low"], spec["high"]
    if spec.get("log"):
        value = math.exp(rng.uniform(math.log(low), math.log(high)))
    else:
        value = rng.uniform(low, high)
    if spec["type"] == "int":
        return int(_quantise(round(value), spec))
    return float(_quantise(value, spec))


def _under(spec: Mapping[str, Any], value: Any) -> PlainSpace:
    """The sub-space ``value`` opens (empty when it opens none)."""
    found = branches(spec)
    return found.get(value, {}) if isinstance(value, str) else {}


def sample_params(
    space: PlainSpace, rng: random.Random, fixed: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A value for every dimension of the branches taken (``fixed`` ones given)."""
    out: dict[str, Any] = {}
    for name, spec in space.items():
        value = sample_value(spec, rng)
        out[name] = value = fixed[name] if fixed is not None and name in fixed else value
        out.update(sample_params(_under(spec, value), rng, fixed))
    return out


def perturb_value(
    value: Any,
    spec: Mapping[str, Any],
    rng: random.Random,
    resample_probability: float,
    factors: Sequence[float],
) -> Any:
    """Explore one value: resample, or multiply (float/int) / step to a neighbour (categorical)."""
    if rng.random() < resample_probability:
        return sample_value(spec, rng)
    if spec["type"] == "categorical":
        choices = list(spec["choices"])
        if value not in choices or len(choices) == 1:
            return rng.choice(choices)
        i = choices.index(value) + rng.choice((-1, 1))
        i = 1 if i < 0 else len(choices) - 2 if i >= len(choices) else i
        return choices[i]
    factor = rng.choice(list(factors))
    new = float(value) * factor  # a shift in log space: symmetric for log parameters
    if spec["type"] == "int":
        moved = round(new)
        if moved == value and factor != 1.0:  # too small to move an int: step by one
            moved = value + (1 if factor > 1.0 else -1)
        return int(_quantise(moved, spec))
    return float(_quantise(new, spec))


def explore_params(
    params: Mapping[str, Any],
    space: PlainSpace,
    rng: random.Random,
    resample_probability: float,
    factors: Sequence[float],
) -> dict[str, Any]:
    """``params`` with every parameter of ``space`` explored (others are kept); in a
    conditional space, those of the branches the explored choices take."""

    def explore(sub: PlainSpace) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, spec in sub.items():
            if name in params:
                value = perturb_value(params[name], spec, rng, resample_probability, factors)
            else:
                value = sample_value(spec, rng)
            out[name] = value
            under = _under(spec, value)
            if under and name in params and value == params[name]:
                out.update(explore(under))  # the same branch: explored in turn
            elif under:  # another branch: its sub-space sampled afresh
                out.update(sample_params(under, rng))
        return out

    searched = flat(space)
    kept = {k: v for k, v in params.items() if k not in searched}
    return {**kept, **explore(space)}


# --------------------------------------------------------------------------- the scheduler
