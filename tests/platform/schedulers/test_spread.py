"""Trials in flight at distinct points (``spread``), for the ``gp`` and ``skopt`` samplers as
the platform builds them (``build_sampler`` with the sweep's trial budget).

The hard case: eight trials asked one after another with none told, all of them in the
budget's final batch (which exploits the model: a lower confidence bound with a small kappa),
on a bowl whose floor the twenty finished trials have found, where the model's best mean stays
on the floor whatever the believer does. Without the step (``SEPARATION`` 0) both samplers put
two or more of the eight within 2e-3 of each other (gp: 1.0e-3 and skopt: 1.2e-4 apart, seed 0);
with it, every two of them keep the separation and stay on the floor.
"""

from __future__ import annotations

import itertools

import numpy as np
import optuna
import pytest

from hyperfleet.platform.schedulers.optuna import spread
from hyperfleet.platform.schedulers.optuna.samplers import build_sampler
from tests.platform.schedulers.runner import scheduler_config

optuna.logging.set_verbosity(optuna.logging.WARNING)

DISTS = {
    "x": optuna.distributions.FloatDistribution(0.0, 1.0),
    "y": optuna.distributions.FloatDistribution(0.0, 1.0),
}
FINISHED = 20
IN_FLIGHT = 8
SAMPLERS = {
    "gp": {"type": "gp", "n_startup_trials": FINISHED},
    "skopt": {"type": "skopt", "n_initial_points": FINISHED},
}


def bowl(p: dict[str, float]) -> float:
    return (p["x"] - 0.3) ** 2 + (p["y"] - 0.7) ** 2


def in_flight(sampler: str) -> list[np.ndarray]:
    """The points of eight trials asked with none told, after twenty finished random trials; the
    budget (``FINISHED + 1``) puts all eight in its final batch."""
    cfg = scheduler_config({**SAMPLERS[sampler], "seed": 0})
    study = optuna.create_study(sampler=build_sampler(cfg, n_trials=FINISHED + 1))
    rng = np.random.default_rng(0)
    for _ in range(FINISHED):
        params = {"x": float(rng.uniform()), "y": float(rng.uniform())}
        trial = optuna.trial.create_trial(params=params, distributions=DISTS, value=bowl(params))
        study.add_trial(trial)
    points = []
    for _ in range(IN_FLIGHT):
        trial = study.ask()
        points.append(np.array([trial.suggest_float(n, d.low, d.high) for n, d in DISTS.items()]))
    return points


def closest_pair(points: list[np.ndarray]) -> float:
    return min(float(np.abs(a - b).max()) for a, b in itertools.combinations(points, 2))


@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
def test_eight_trials_in_flight_keep_apart(sampler: str) -> None:
    points = in_flight(sampler)
    assert closest_pair(points) >= spread.SEPARATION, points
    # and they exploit: all on the bowl's floor (its value 0.01 is 0.1 from the minimum)
    assert max(bowl({"x": p[0], "y": p[1]}) for p in points) < 0.01, points


@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
def test_without_the_step_they_share_points(sampler: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the step is for: the same asks with the separation at 0 put two or more of the
    eight within 2e-3 of each other."""
    monkeypatch.setattr(spread, "SEPARATION", 0.0)
    assert closest_pair(in_flight(sampler)) < 2e-3


def test_crowded_and_best_apart_read_categoricals_as_choices() -> None:
    pending = np.array([[0.5, 2.0]])  # column 1: a choice's index
    categorical = np.array([False, True])
    assert spread.crowded(np.array([0.5, 2.0]), pending, categorical)
    assert spread.crowded(np.array([0.505, 2.0]), pending, categorical)
    assert not spread.crowded(np.array([0.5, 1.0]), pending, categorical)  # another choice
    assert not spread.crowded(np.array([0.5, 2.0]), None, categorical)
    points = np.array([[0.5, 2.0], [0.9, 2.0], [0.501, 2.0], [0.5, 0.0]])
    scores = np.array([9.0, 1.0, 8.0, np.nan])
    assert spread.best_apart(points, scores, pending, categorical) == 1
    assert spread.best_apart(points[[0, 2]], scores[[0, 2]], pending, categorical) is None
