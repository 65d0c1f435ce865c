"""Known optimisation test functions with known minima, for checking searchers.

Branin (Branin-Hoo) is a smooth 2-D function with three global minima of equal value
0.397887 on ``x1 in [-5, 10], x2 in [0, 15]``; a good Bayesian optimiser finds one within a few
dozen evaluations, random search needs hundreds. Hartmann-6 is a 6-D sum of four Gaussian-like
wells on the unit cube, with one global minimum -3.32237 and several local ones (about -3.2):
it separates model-based searchers that locate the right basin from those that stall in a local
one. Both are the standard benchmarks of the Bayesian optimisation literature (Dixon & Szegö,
1978; used by Jones et al. 1998, Snoek et al. 2012).

The six-hump camel function is a 2-D polynomial on ``[-3, 3] x [-2, 2]`` with two global
minima of -1.0316 and four local ones, on a domain whose edges are very high (162 at a corner): a
searcher that loses the basin and wanders to the edges shows at once.

The functions take plain floats so any searcher can call them; ``BRANIN``, ``HARTMANN6`` and
``CAMEL6`` describe their box bounds and minima.

``run_concurrent`` drives an Optuna sampler on one of them as the platform does, with trials
in flight: the platform's scheduler calls ``study.ask()`` and suggests every parameter at once,
the trial stays RUNNING in storage while it trains, and ``study.tell`` records its result when it
ends. Here ``concurrency`` trials are asked up front; each gets a duration drawn from a seeded
generator, and on a virtual clock the first to finish is told and a new trial asked in its place
until the budget is spent. The finishing order is thus random but reproducible, and the sampler
sees exactly what it would see from a sweep with that many workers.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna


@dataclass(frozen=True)
class KnownFunction:
    """A test function with its box bounds and its global minimum."""

    name: str
    fn: Callable[[Sequence[float]], float]
    bounds: tuple[tuple[float, float], ...]
    minimum: float
    argmins: tuple[tuple[float, ...], ...]

    @property
    def dim(self) -> int:
        return len(self.bounds)


def branin(x: Sequence[float]) -> float:
    """Branin-Hoo at ``x = (x1, x2)``; global minimum 0.397887 at three points."""
    x1, x2 = float(x[0]), float(x[1])
    b = 5.1 / (4.0 * math.pi**2)
    c = 5.0 / math.pi
    t = 1.0 / (8.0 * math.pi)
    return (x2 - b * x1**2 + c * x1 - 6.0) ** 2 + 10.0 * (1.0 - t) * math.cos(x1) + 10.0


_H6_ALPHA = (1.0, 1.2, 3.0, 3.2)
_H6_A = (
    (10.0, 3.0, 17.0, 3.5, 1.7, 8.0),
    (0.05, 10.0, 17.0, 0.1, 8.0, 14.0),
    (3.0, 3.5, 1.7, 10.0, 17.0, 8.0),
    (17.0, 8.0, 0.05, 10.0, 0.1, 14.0),
)
_H6_P = (
    (0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886),
    (0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991),
    (0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650),
    (0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381),
)


def hartmann6(x: Sequence[float]) -> float:
    """Hartmann-6 on ``[0, 1]^6``; global minimum -3.32237."""
    if len(x) != 6:
        raise ValueError(f"hartmann6 takes 6 coordinates, got {len(x)}")
    return hartmann(x, _H6_ALPHA, _H6_A, _H6_P)


def hartmann(
    x: Sequence[float],
    alpha: Sequence[float],
    a: Sequence[Sequence[float]],
    p: Sequence[Sequence[float]],
) -> float:
    """A member of the Hartmann family (Dixon & Szegö, 1978): ``-sum_i alpha_i *
    exp(-sum_j a_ij (x_j - p_ij)^2)``, one Gaussian well per row of ``a`` and ``p``."""
    total = 0.0
    for weight, a_row, p_row in zip(alpha, a, p, strict=True):
        inner = sum(aj * (float(xj) - pj) ** 2 for aj, xj, pj in zip(a_row, x, p_row, strict=True))
        total += weight * math.exp(-inner)
    return -total


BRANIN = KnownFunction(
    name="branin",
    fn=branin,
    bounds=((-5.0, 10.0), (0.0, 15.0)),
    minimum=0.397887,
    argmins=((-math.pi, 12.275), (math.pi, 2.275), (9.42478, 2.475)),
)

HARTMANN6 = KnownFunction(
    name="hartmann6",
    fn=hartmann6,
    bounds=((0.0, 1.0),) * 6,
    minimum=-3.32237,
    argmins=((0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573),),
)


def camel6(x: Sequence[float]) -> float:
    """Six-hump camel at ``x = (x1, x2)``; global minimum -1.031628 at two points."""
    x1, x2 = float(x[0]), float(x[1])
    return (4.0 - 2.1 * x1**2 + x1**4 / 3.0) * x1**2 + x1 * x2 + (-4.0 + 4.0 * x2**2) * x2**2


CAMEL6 = KnownFunction(
    name="camel6",
    fn=camel6,
    bounds=((-3.0, 3.0), (-2.0, 2.0)),
    minimum=-1.031628,
    argmins=((0.0898, -0.7126), (-0.0898, 0.7126)),
)

FUNCTIONS = {f.name: f for f in (BRANIN, HARTMANN6, CAMEL6)}


def run_concurrent(
    study: optuna.Study, fn: KnownFunction, n_trials: int, concurrency: int, seed: int = 0
) -> list[float]:
    """Minimise ``fn`` in ``study`` with ``concurrency`` trials in flight; see the docstring.

    Returns the values in the order the trials were asked (trial number order for a fresh
    study). Trial durations are uniform in [0.5, 1.5) from ``random.Random(seed)``.
    """
    if concurrency < 1 or n_trials < 1:
        raise ValueError(f"concurrency and n_trials must be >= 1, got {concurrency}, {n_trials}")
    clock = random.Random(seed)
    values: dict[int, float] = {}
    in_flight: list[tuple[float, int, Any, float]] = []  # (end time, number, trial, value)
    now = 0.0
    asked = 0
    while asked < n_trials or in_flight:
        while asked < n_trials and len(in_flight) < concurrency:
            trial = study.ask()
            x = [trial.suggest_float(f"x{i}", lo, hi) for i, (lo, hi) in enumerate(fn.bounds)]
            end = now + clock.uniform(0.5, 1.5)
            heapq.heappush(in_flight, (end, trial.number, trial, fn.fn(x)))
            asked += 1
        now, number, trial, value = heapq.heappop(in_flight)
        study.tell(trial, value)
        values[number] = value
    return [values[n] for n in sorted(values)]


def workload(ctx: Any) -> None:
    """A trial that evaluates a known function at ``x0, x1, ...`` and reports ``value``.

    Run it in-process (``trial.resources.devices: 0``, ``trial.steps: 1``) to benchmark a
    scheduler through the platform: ``params: {function: branin}``.
    """
    fn = FUNCTIONS[str(ctx.params["function"])]
    x = [float(ctx.params[f"x{i}"]) for i in range(fn.dim)]
    ctx.report(1, {"value": fn.fn(x)})


workload.hyperfleet_params = {"function": "branin", **{f"x{i}": 0.0 for i in range(6)}}  # type: ignore[attr-defined]
