"""Scheduler and pruner configs: validation messages, builders, multi-objective, pruning."""

from __future__ import annotations

import sys
from typing import Any

import optuna
import pytest

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config.scheduler_parsing import (
    parse_pruner_config,
    parse_scheduler_config,
)
from hyperfleet.platform.schedulers.optuna.gp import PendingAwareGPSampler
from hyperfleet.platform.schedulers.optuna.history import HistoryCappedSampler
from hyperfleet.platform.schedulers.optuna.samplers import (
    AskTellGridSampler,
    build_pruner,
    build_sampler,
)
from hyperfleet.platform.schedulers.optuna.skopt_sampler import SkoptSampler

optuna.logging.set_verbosity(optuna.logging.WARNING)

ALL_SCHEDULERS = ["tpe", "random", "grid", "cmaes", "qmc", "gp", "nsga2", "skopt"]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"type": "skopt", "acq_func": "XX"}, "scheduler.acq_func: "),
        ({"type": "skopt", "base_estimator": "SVM"}, "scheduler.base_estimator: "),
        ({"type": "skopt", "liar": "cl_median"}, "scheduler.liar: "),
        ({"type": "skopt", "max_history": 1}, "scheduler.max_history: "),
        ({"type": "skopt", "time_budget_s": 0}, "scheduler.time_budget_s: "),
        ({"type": "tpe", "n_startup": 3}, "scheduler.n_startup: Extra inputs"),
        ({"type": "tpe", "seed": "abc"}, "scheduler.seed: "),
        ({"type": "bohb"}, "scheduler.type: unknown type, expected one of 'tpe'"),
        ({}, "scheduler.type: missing"),
        (
            {"type": "cmaes", "use_separable_cma": True, "with_margin": True},
            "scheduler.with_margin",
        ),
        ({"type": "nsga2", "crossover_prob": 1.5}, "scheduler.crossover_prob: "),
    ],
)
def test_scheduler_errors_name_the_field(raw: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_scheduler_config(raw)
    assert len(info.value.problems) == 1
    assert info.value.problems[0].startswith(expected), info.value.problems


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"type": "percentile"}, "pruner.percentile: Field required"),
        ({"type": "percentile", "percentile": 120}, "pruner.percentile: "),
        ({"type": "asha", "min_resource": "x"}, "pruner.min_resource: Input should be 'auto' or"),
        ({"type": "asha", "bootstrap_count": 2}, "pruner.bootstrap_count: must be 0 when"),
        ({"type": "asha", "reduction_factor": 1}, "pruner.reduction_factor: "),
        ({"type": "hyperband", "min_resource": 5, "max_resource": 2}, "pruner.max_resource: "),
        ({"type": "median", "interval_steps": 0}, "pruner.interval_steps: "),
    ],
)
def test_pruner_errors_name_the_field(raw: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_pruner_config(raw)
    assert info.value.problems[0].startswith(expected), info.value.problems
    assert "(got " in info.value.problems[0] or "required" in info.value.problems[0]


def test_configs_are_frozen_and_documented() -> None:
    cfg = parse_scheduler_config({"type": "skopt"})
    with pytest.raises(Exception, match="frozen"):
        cfg.acq_func = "PI"  # type: ignore[misc]
    from hyperfleet.platform.config import schedulers as configs

    for model in vars(configs).values():
        if isinstance(model, type) and issubclass(model, configs._Frozen):
            for name, field in model.model_fields.items():
                assert name == "type" or field.description, f"{model.__name__}.{name}"


@pytest.mark.parametrize("kind", ALL_SCHEDULERS)
def test_build_sampler_covers_every_type(kind: str) -> None:
    if kind == "cmaes":
        pytest.importorskip("cmaes")
    cfg = parse_scheduler_config({"type": kind})  # no seed: the bare sampler
    sampler = build_sampler(cfg, grid={"x": [0.0, 0.5, 1.0]})
    expected = {
        "tpe": optuna.samplers.TPESampler,
        "random": optuna.samplers.RandomSampler,
        "grid": AskTellGridSampler,  # Optuna's grid sampler, usable with ask-and-tell
        "cmaes": optuna.samplers.CmaEsSampler,
        "qmc": optuna.samplers.QMCSampler,
        "gp": PendingAwareGPSampler,  # Optuna's, with the start-up and lie of gp_sampler
        "nsga2": optuna.samplers.NSGAIISampler,
        "skopt": SkoptSampler,
    }[kind]
    if kind == "tpe":  # TPE given at most max_history finished trials
        assert type(sampler) is HistoryCappedSampler
        sampler = sampler.inner
    assert type(sampler) is expected


def test_cmaes_without_the_package_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cmaes", None)  # as if it weren't installed
    with pytest.raises(ConfigError, match=r"scheduler\.type: 'cmaes' needs the 'cmaes'"):
        build_sampler(parse_scheduler_config({"type": "cmaes"}))


@pytest.mark.parametrize("kind", ["cmaes", "skopt"])
def test_single_objective_types_refuse_several_objectives(kind: str) -> None:
    with pytest.raises(ConfigError, match=f"scheduler.type: '{kind}' optimises a single"):
        build_sampler(parse_scheduler_config({"type": kind}), n_objectives=2)


@pytest.mark.parametrize("kind", ["nsga2", "tpe", "gp"])
def test_multi_objective_samplers_find_a_front(kind: str) -> None:
    raw = {"type": kind, "seed": 0, **({"population_size": 6} if kind == "nsga2" else {})}
    if kind == "gp":
        raw["n_startup_trials"] = 6
    sampler = build_sampler(parse_scheduler_config(raw), n_objectives=2)
    study = optuna.create_study(directions=["minimize", "maximize"], sampler=sampler)

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        x = trial.suggest_float("x", 0.0, 1.0)
        y = trial.suggest_float("y", 0.0, 1.0)
        return x**2 + y, 1.0 - (1.0 - x) ** 2 - y  # conflicting in x: a curved front

    study.optimize(objective, n_trials=10 if kind == "gp" else 16)
    assert len(study.best_trials) >= 3


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"type": "none"}, optuna.pruners.NopPruner),
        ({"type": "median", "n_startup_trials": 2}, optuna.pruners.MedianPruner),
        ({"type": "percentile", "percentile": 25.0}, optuna.pruners.PercentilePruner),
        (
            {"type": "asha", "min_resource": 1, "reduction_factor": 3},
            optuna.pruners.SuccessiveHalvingPruner,
        ),
        ({"type": "hyperband", "max_resource": 27}, optuna.pruners.HyperbandPruner),
    ],
)
def test_build_pruner_covers_every_type(raw: dict[str, Any], expected: type) -> None:
    assert type(build_pruner(parse_pruner_config(raw))) is expected


@pytest.mark.parametrize(
    "raw",
    [
        {"type": "median", "n_startup_trials": 3},
        {"type": "percentile", "percentile": 25.0, "n_startup_trials": 3},
        {"type": "asha", "min_resource": 1, "reduction_factor": 3},
        {"type": "hyperband", "min_resource": 1, "max_resource": 9, "reduction_factor": 3},
    ],
)
def test_pruners_stop_bad_curves(raw: dict[str, Any]) -> None:
    """Learning curves whose level is set by x: the pruner must stop some bad ones early."""
    pruner = build_pruner(parse_pruner_config(raw))
    sampler = optuna.samplers.RandomSampler(seed=0)
    study = optuna.create_study(sampler=sampler, pruner=pruner)
    steps_run = []

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", 0.0, 1.0)
        for step in range(1, 10):
            value = x + 1.0 / step
            trial.report(value, step)
            if trial.should_prune():
                steps_run.append(step)
                raise optuna.TrialPruned()
        steps_run.append(9)
        return value

    study.optimize(objective, n_trials=24)
    pruned = study.get_trials(states=(optuna.trial.TrialState.PRUNED,))
    complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(pruned) >= 6 and sum(steps_run) < 0.8 * 9 * 24
    # What survives is better on average than what was stopped.
    mean = lambda ts: sum(t.params["x"] for t in ts) / len(ts)  # noqa: E731
    assert mean(complete) < mean(pruned)
