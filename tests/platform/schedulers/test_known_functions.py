"""Searchers on known functions, each beside random search as the baseline.

Seeds are fixed in advance (0 for single-seed checks; 0, 1, 2 for medians). The runner is
``runner.best_value``, so routing these through the platform's in-process trials later
changes one function.
"""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from hyperfleet.platform.schedulers.testfunctions import BRANIN, HARTMANN6, KnownFunction
from tests.platform.schedulers.runner import best_value, scheduler_config

# skopt: sample the acquisition at 2000 points instead of L-BFGS, to keep the tests quick.
SKOPT_GP = {"type": "skopt", "base_estimator": "GP", "acq_optimizer": "sampling"}
GP = {"type": "gp"}
TPE = {"type": "tpe"}
RANDOM = {"type": "random"}


def run(raw: dict[str, Any], fn: KnownFunction, n_trials: int, seed: int) -> float:
    return best_value(scheduler_config({**raw, "seed": seed}), fn, n_trials)


@pytest.mark.parametrize(
    ("raw", "n_trials", "target"), [(SKOPT_GP, 40, 0.42), (GP, 40, 0.42), (TPE, 60, 0.6)]
)
def test_branin(raw: dict[str, Any], n_trials: int, target: float) -> None:
    best = run(raw, BRANIN, n_trials, seed=0)
    baseline = run(RANDOM, BRANIN, n_trials, seed=0)
    print(
        f"\nbranin {raw['type']}: best {best:.4f} in {n_trials} trials "
        f"(random {baseline:.4f}, minimum {BRANIN.minimum})"
    )
    assert best <= target


@pytest.mark.slow
@pytest.mark.parametrize("raw", [SKOPT_GP, GP], ids=["skopt", "gp"])
def test_hartmann6_median_over_three_seeds(raw: dict[str, Any]) -> None:
    bests = [run(raw, HARTMANN6, 60, seed) for seed in (0, 1, 2)]
    randoms = [run(RANDOM, HARTMANN6, 60, seed) for seed in (0, 1, 2)]
    median, random_median = statistics.median(bests), statistics.median(randoms)
    print(
        f"\nhartmann6 {raw['type']}: median {median:.4f} {[round(b, 4) for b in bests]} "
        f"(random median {random_median:.4f}, minimum {HARTMANN6.minimum})"
    )
    assert median <= -3.0
