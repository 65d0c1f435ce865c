"""SkoptSampler beyond the conformance suite: every surrogate, liar, history cap, fallback."""

from __future__ import annotations

import logging
import math
import statistics
from typing import Any

import optuna
import pytest

from hyperfleet.platform.schedulers.optuna.samplers import build_sampler
from hyperfleet.platform.schedulers.optuna.skopt_sampler import (
    ATTR_FALLBACK,
    ATTR_SAMPLER,
    ATTR_TIME,
    SkoptSampler,
)
from tests.platform.schedulers.runner import scheduler_config

optuna.logging.set_verbosity(optuna.logging.WARNING)


def objective(trial: optuna.Trial) -> float:
    x = trial.suggest_float("x", 1e-3, 10.0, log=True)
    n = trial.suggest_int("n", 0, 20, step=4)
    c = trial.suggest_categorical("c", [None, 0.5, "b"])
    return (math.log10(x) - 0.2) ** 2 + abs(n - 8) / 8 + (0.0 if c == 0.5 else 0.4)


def skopt_study(n_trials: int, **cfg: Any) -> optuna.Study:
    raw = {"type": "skopt", "n_initial_points": 4, "n_candidates": 300, "seed": 0, **cfg}
    study = optuna.create_study(sampler=build_sampler(scheduler_config(raw)))
    study.optimize(objective, n_trials=n_trials)
    return study


@pytest.mark.parametrize(
    ("estimator", "acq"),
    [("GP", "EI"), ("GP", "gp_hedge"), ("RF", "PI"), ("ET", "LCB"), ("GBRT", "EI")],
)
def test_every_surrogate_suggests_in_the_space(estimator: str, acq: str) -> None:
    study = skopt_study(7, base_estimator=estimator, acq_func=acq)
    trials = study.get_trials()
    assert [t.user_attrs[ATTR_SAMPLER] for t in trials[4:]] == ["skopt"] * 3
    for t in trials:
        assert ATTR_TIME in t.user_attrs and t.user_attrs[ATTR_TIME] >= 0
        assert ATTR_FALLBACK not in t.user_attrs
        assert 1e-3 <= t.params["x"] <= 10.0 and t.params["n"] in (0, 4, 8, 12, 16, 20)
        assert t.params["c"] in (None, 0.5, "b")


@pytest.mark.parametrize("liar", ["cl_min", "cl_mean", "cl_max"])
def test_liar_spreads_concurrent_asks(liar: str) -> None:
    study = skopt_study(6, liar=liar, acq_optimizer="lbfgs")
    asked = []
    for _ in range(4):
        trial = study.ask()
        asked.append(
            (
                trial.suggest_float("x", 1e-3, 10.0, log=True),
                trial.suggest_int("n", 0, 20, step=4),
                trial.suggest_categorical("c", [None, 0.5, "b"]),
            )
        )
    assert len({(round(math.log10(x), 2), n, c) for x, n, c in asked}) == 4, asked


def test_maximize_direction_is_respected() -> None:
    sampler = build_sampler(scheduler_config({"type": "skopt", "n_initial_points": 5, "seed": 1}))
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.optimize(lambda t: -((t.suggest_float("x", -5.0, 5.0) - 2.0) ** 2), n_trials=15)
    # With the sign wrong the model would chase the edges (x = -5 gives -49).
    model_values = [t.value for t in study.get_trials()[5:]]
    assert statistics.median(model_values) > -1.0, model_values


def test_time_budget_falls_back_to_tpe(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(
        logging.WARNING, logger="hyperfleet.platform.schedulers.optuna.skopt_sampler"
    ):
        study = skopt_study(7, time_budget_s=1e-6)
    trials = study.get_trials()
    # Trial 4 is the first skopt suggestion; it overran the budget, so 5 and 6 used TPE.
    assert trials[4].user_attrs[ATTR_SAMPLER] == "skopt"
    assert ATTR_FALLBACK not in trials[4].user_attrs
    for t in trials[5:]:
        assert t.user_attrs[ATTR_SAMPLER] == "tpe"
        assert "time_budget_s" in t.user_attrs[ATTR_FALLBACK]
    assert sum("time_budget_s" in r.getMessage() for r in caplog.records) == 2


def test_conditional_params_come_from_tpe() -> None:
    def conditional(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", 0.0, 1.0)
        if trial.number % 2:
            return x + trial.suggest_float("extra", 0.0, 1.0)
        return x

    sampler = build_sampler(scheduler_config({"type": "skopt", "n_initial_points": 3, "seed": 0}))
    study = optuna.create_study(sampler=sampler)
    study.optimize(conditional, n_trials=8)
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.get_trials())
    assert study.get_trials()[-1].user_attrs[ATTR_SAMPLER] == "skopt"


def test_max_history_keeps_best_half_and_most_recent() -> None:
    study = optuna.create_study()
    values = [5.0, 0.1, 7.0, 0.2, 9.0, 3.0, 8.0, 6.0]
    for v in values:
        study.add_trial(
            optuna.trial.create_trial(
                params={"x": v},
                distributions={"x": optuna.distributions.FloatDistribution(0, 10)},
                value=v,
            )
        )
    sampler = SkoptSampler(max_history=4)
    kept = sampler._history(study.get_trials(), sign=1.0)
    assert sorted(t.number for t in kept) == [1, 3, 6, 7]  # best two (0.1, 0.2), last two


def test_multi_objective_is_refused() -> None:
    study = optuna.create_study(directions=["minimize", "maximize"], sampler=SkoptSampler())
    with pytest.raises(ValueError, match="multi-objective"):
        study.optimize(lambda t: (t.suggest_float("x", 0, 1), 1.0), n_trials=1)
