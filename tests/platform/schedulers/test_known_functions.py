"""Each searcher reaches its target on known functions, with the seed fixed in advance.

The samplers are built from config as a sweep builds them and driven directly through the
platform's ask/tell path (``runner.direct_best_value``); one slow test runs a real sweep through
the platform with two trials in flight. They are search-quality runs, marked long:
``make test-long`` runs them (CI does), ``make test`` does not. How the searchers compare with
random search, over seeds and concurrency levels, is the benchmark's business:
``benchmarks/bench_parallel_bo.py``.
"""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from hyperfleet.testing.functions import BRANIN, CAMEL6, HARTMANN6, KnownFunction
from tests.platform.schedulers.runner import best_value, direct_best_value, scheduler_config

pytestmark = pytest.mark.long

SKOPT = {"type": "skopt"}
GP = {"type": "gp"}
TPE = {"type": "tpe"}


def run(raw: dict[str, Any], fn: KnownFunction, n_trials: int, seed: int, c: int = 1) -> float:
    return direct_best_value(scheduler_config({**raw, "seed": seed}), fn, n_trials, c)


@pytest.mark.parametrize(
    ("raw", "n_trials", "target"),
    [(SKOPT, 40, 0.42), (GP, 30, 0.42), (TPE, 60, 0.6)],
    ids=["skopt", "gp", "tpe"],
)
def test_branin(raw: dict[str, Any], n_trials: int, target: float) -> None:
    assert run(raw, BRANIN, n_trials, seed=0) <= target  # minimum 0.397887


@pytest.mark.parametrize(
    ("raw", "n_trials", "target"), [(SKOPT, 30, -0.95), (GP, 40, -0.9)], ids=["skopt", "gp"]
)
def test_camel6_with_four_trials_in_flight(
    raw: dict[str, Any], n_trials: int, target: float
) -> None:
    # The function of issue #17, where skopt at concurrency 2 lost the basin (best -0.10) and
    # gp one seed (-0.30): the target is inside the global basin.
    assert run(raw, CAMEL6, n_trials, seed=0, c=4) <= target  # minimum -1.0316


@pytest.mark.parametrize("raw", [SKOPT, GP], ids=["skopt", "gp"])
def test_hartmann6_median_over_five_seeds(raw: dict[str, Any]) -> None:
    # Hartmann-6 has a second basin (about -3.20 at best) and flat regions where a seed can
    # stay for 60 trials (-1.7, -2.0); the median over seeds 0-4 says whether the searcher
    # finds the global one as a rule.
    bests = [run(raw, HARTMANN6, 60, seed) for seed in (0, 1, 2, 3, 4)]
    assert statistics.median(bests) <= -3.0, bests  # minimum -3.32237


@pytest.mark.slow
def test_skopt_through_the_platform_with_two_in_flight() -> None:
    cfg = scheduler_config({**SKOPT, "seed": 0})
    assert best_value(cfg, BRANIN, 30, concurrency=2) <= 0.5
