"""One conformance suite, run against every scheduler type.

Each type must: suggest values inside a mixed space (log float, int, categorical), be
reproducible under a seed, give 4 pairwise distinct suggestions to 4 asks made before any
result comes back, and continue an interrupted study (a new Study object on the same SQLite
storage) with its history intact and without replaying earlier suggestions.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import optuna
import pytest

from hyperfleet.platform.schedulers.optuna.samplers import TrialSeededSampler, build_sampler
from hyperfleet.platform.schedulers.optuna.skopt_sampler import ATTR_SAMPLER
from tests.platform.schedulers.runner import scheduler_config

optuna.logging.set_verbosity(optuna.logging.WARNING)

# Small start-up phases so that 10 trials reach each sampler's model-based path.
CONFIGS: dict[str, dict[str, Any]] = {
    "tpe": {"type": "tpe", "n_startup_trials": 4},
    "random": {"type": "random"},
    "grid": {"type": "grid"},
    "cmaes": {"type": "cmaes", "n_startup_trials": 2, "popsize": 4},
    "qmc": {"type": "qmc", "scramble": True},
    "gp": {"type": "gp", "n_startup_trials": 4},
    "skopt": {"type": "skopt", "n_initial_points": 4, "n_candidates": 500},
}
GRID = {"lr": [1e-4, 1e-3, 1e-2, 1e-1], "layers": [1, 2, 4, 8], "act": ["relu", "gelu", "tanh"]}
ACT_COST = {"relu": 0.3, "gelu": 0.0, "tanh": 0.5}


def suggest(trial: optuna.Trial) -> dict[str, Any]:
    return {
        "lr": trial.suggest_float("lr", 1e-4, 1e-1, log=True),
        "layers": trial.suggest_int("layers", 1, 8),
        "act": trial.suggest_categorical("act", ["relu", "gelu", "tanh"]),
    }


def loss(params: dict[str, Any]) -> float:
    return (
        (math.log10(params["lr"]) + 2.5) ** 2
        + (params["layers"] - 5) ** 2 / 10
        + ACT_COST[params["act"]]
    )


def objective(trial: optuna.Trial) -> float:
    return loss(suggest(trial))


@pytest.fixture(params=sorted(CONFIGS))
def kind(request: pytest.FixtureRequest) -> str:
    if request.param == "cmaes":
        pytest.importorskip("cmaes", reason="scheduler type cmaes needs the cmaes package")
    return str(request.param)


def make_sampler(kind: str, seed: int = 7) -> optuna.samplers.BaseSampler:
    cfg = scheduler_config({**CONFIGS[kind], "seed": seed})
    return build_sampler(cfg, grid=GRID if kind == "grid" else None)


def key(params: dict[str, Any]) -> tuple[Any, ...]:
    """A suggestion, with lr to 2 decimals of log10: near-identical points count as equal."""
    return (round(math.log10(params["lr"]), 2), params["layers"], params["act"])


def test_suggestions_lie_in_the_space(kind: str) -> None:
    study = optuna.create_study(sampler=make_sampler(kind))
    study.optimize(objective, n_trials=10)
    trials = study.get_trials()
    assert len(trials) == 10
    for t in trials:
        assert t.state == optuna.trial.TrialState.COMPLETE
        assert set(t.params) == {"lr", "layers", "act"}
        assert isinstance(t.params["lr"], float) and 1e-4 <= t.params["lr"] <= 1e-1
        assert isinstance(t.params["layers"], int) and 1 <= t.params["layers"] <= 8
        assert t.params["act"] in ACT_COST
        if kind == "grid":
            assert all(t.params[name] in values for name, values in GRID.items())
    if kind == "skopt":
        used = [t.user_attrs.get(ATTR_SAMPLER) for t in trials]
        assert used[:4] == ["tpe"] * 4 and used[4:] == ["skopt"] * 6, used


def test_reproducible_under_a_seed(kind: str) -> None:
    runs = []
    for _ in range(2):
        study = optuna.create_study(sampler=make_sampler(kind, seed=3))
        study.optimize(objective, n_trials=8)
        runs.append([t.params for t in study.get_trials()])
    assert runs[0] == runs[1]
    other = optuna.create_study(sampler=make_sampler(kind, seed=4))
    other.optimize(objective, n_trials=8)
    assert [t.params for t in other.get_trials()] != runs[0]


def test_four_concurrent_asks_are_distinct(kind: str) -> None:
    study = optuna.create_study(sampler=make_sampler(kind))
    study.optimize(objective, n_trials=6)
    pending = []
    for _ in range(4):  # ask four times before any result comes back
        trial = study.ask()
        pending.append((trial, suggest(trial)))
    keys = [key(params) for _, params in pending]
    assert len(set(keys)) == 4, keys
    for trial, params in pending:
        study.tell(trial, loss(params))
    assert len(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))) == 10


def test_interrupted_study_keeps_history_and_continues(kind: str, tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'sweep.db'}"
    first = optuna.create_study(study_name="s", storage=storage, sampler=make_sampler(kind))
    first.optimize(objective, n_trials=6)
    before = [(t.number, t.params, t.value) for t in first.get_trials()]
    del first  # the "process" ends; a new one rebuilds the sampler from config and storage

    resumed = optuna.load_study(study_name="s", storage=storage, sampler=make_sampler(kind))
    assert [(t.number, t.params, t.value) for t in resumed.get_trials()] == before
    resumed.optimize(objective, n_trials=6)
    trials = resumed.get_trials()
    assert [t.number for t in trials] == list(range(12))
    assert [(t.number, t.params, t.value) for t in trials[:6]] == before
    # The rebuilt sampler continues rather than replaying its first suggestions.
    keys = [key(t.params) for t in trials]
    assert len(set(keys)) == 12, keys


def test_seeded_wrapper_finds_random_states(kind: str) -> None:
    sampler = make_sampler(kind)
    assert isinstance(sampler, TrialSeededSampler)
    if kind != "qmc":  # QMCSampler keeps an integer seed and a sample counter in storage
        assert sampler.random_states()
