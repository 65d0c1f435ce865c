"""Build Optuna samplers and pruners from their typed configuration.

``build_sampler`` maps each ``scheduler.type`` onto its Optuna sampler (``skopt`` onto
:class:`~hyperfleet.platform.schedulers.optuna.skopt_sampler.SkoptSampler`), checks that the
type can handle the number of objectives, and, when a seed is given, wraps the sampler in
:class:`TrialSeededSampler`.

Why the wrapper: an Optuna sampler draws from one random stream seeded once at construction.
A sweep's scheduler is rebuilt from config and storage in whichever process needs it, so a
sampler rebuilt after an interruption would replay the same stream and suggest the first
trials' points again (RandomSampler, TPE's start-up, the grid order). ``TrialSeededSampler``
reseeds the wrapped sampler's random states before every call from ``(seed, trial number,
call)``, which makes each suggestion a function of the seed, the trial number and the study's
history only: reproducible, independent of which process asks, and safe to resume.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers._lazy_random_state import LazyRandomState
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from hyperfleet.errors import ConfigError
from hyperfleet.platform.schedulers.configs import (
    MULTI_OBJECTIVE_TYPES,
    ASHAConfig,
    CmaEsConfig,
    GPConfig,
    GridConfig,
    HyperbandConfig,
    MedianPrunerConfig,
    NoPrunerConfig,
    NSGA2Config,
    PercentilePrunerConfig,
    PrunerConfig,
    QMCConfig,
    RandomConfig,
    SchedulerConfig,
    SkoptConfig,
    TPEConfig,
)
from hyperfleet.platform.schedulers.optuna.gp import PendingAwareGPSampler
from hyperfleet.platform.schedulers.optuna.skopt_sampler import SkoptSampler
from hyperfleet.platform.schedulers.optuna.skopt_support import derive_seed

logger = logging.getLogger(__name__)


class AskTellGridSampler(optuna.samplers.GridSampler):
    """Optuna's grid sampler for ask-and-tell use: it stops the study from ``after_trial``,
    which only works inside ``study.optimize``; the sweep loop asks ``is_exhausted`` instead."""

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        return None


def build_sampler(
    cfg: SchedulerConfig,
    grid: Mapping[str, Sequence[Any]] | None = None,
    n_objectives: int = 1,
    n_trials: int | None = None,
) -> optuna.samplers.BaseSampler:
    """The Optuna sampler for ``cfg``.

    ``grid`` is the space's grid (needed by ``grid``); ``n_objectives`` the number of
    objectives of the sweep; ``n_trials`` its trial budget, if it has one (``gp`` and
    ``skopt`` exploit in the budget's final batch: ``final_batch``). Raises ConfigError when
    the type can't handle several objectives or a package it needs is missing.
    """
    if n_objectives > 1 and cfg.type not in MULTI_OBJECTIVE_TYPES:
        allowed = ", ".join(sorted(MULTI_OBJECTIVE_TYPES))
        raise ConfigError(
            f"scheduler.type: {cfg.type!r} optimises a single objective, but the sweep has "
            f"{n_objectives} objectives; use one of {allowed}"
        )
    with warnings.catch_warnings():
        # Multivariate TPE and QMC are "experimental" in Optuna: a warning per build, not news.
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = _make(cfg, grid, n_trials)
    return sampler if cfg.seed is None else TrialSeededSampler(sampler, cfg.seed)


def _make(
    cfg: SchedulerConfig, grid: Mapping[str, Sequence[Any]] | None, n_trials: int | None
) -> optuna.samplers.BaseSampler:
    if isinstance(cfg, TPEConfig):
        return optuna.samplers.TPESampler(
            seed=cfg.seed,
            n_startup_trials=cfg.n_startup_trials,
            n_ei_candidates=cfg.n_ei_candidates,
            multivariate=cfg.multivariate,
            group=cfg.group,
            constant_liar=cfg.constant_liar,
        )
    if isinstance(cfg, RandomConfig):
        return optuna.samplers.RandomSampler(seed=cfg.seed)
    if isinstance(cfg, GridConfig):
        if grid is None:
            raise ConfigError(
                "scheduler.type: 'grid' needs every space dimension to be categorical or to "
                "give a step"
            )
        return AskTellGridSampler(dict(grid), seed=cfg.seed)
    if isinstance(cfg, CmaEsConfig):
        return _cmaes(cfg)
    if isinstance(cfg, QMCConfig):
        return optuna.samplers.QMCSampler(
            qmc_type=cfg.qmc_type,
            scramble=cfg.scramble,
            seed=cfg.seed,
            warn_independent_sampling=False,
            warn_asynchronous_seeding=False,
        )
    if isinstance(cfg, GPConfig):
        return PendingAwareGPSampler(
            pending=cfg.pending,
            value_transform=cfg.value_transform,
            seed=cfg.seed,
            n_startup_trials=cfg.n_startup_trials,
            deterministic_objective=cfg.deterministic_objective,
            warn_independent_sampling=False,
            n_trials=n_trials,
        )
    if isinstance(cfg, NSGA2Config):
        return optuna.samplers.NSGAIISampler(
            population_size=cfg.population_size,
            crossover=_crossover(cfg),
            crossover_prob=cfg.crossover_prob,
            mutation_prob=cfg.mutation_prob,
            swapping_prob=cfg.swapping_prob,
            seed=cfg.seed,
        )
    if isinstance(cfg, SkoptConfig):
        return SkoptSampler(
            base_estimator=cfg.base_estimator,
            acq_func=cfg.acq_func,
            n_initial_points=cfg.n_initial_points,
            liar=cfg.liar,
            max_history=cfg.max_history,
            time_budget_s=cfg.time_budget_s,
            n_candidates=cfg.n_candidates,
            acq_optimizer=cfg.acq_optimizer,
            n_restarts_optimizer=cfg.n_restarts_optimizer,
            xi=cfg.xi,
            kappa=cfg.kappa,
            value_transform=cfg.value_transform,
            seed=cfg.seed,
            n_trials=n_trials,
        )
    raise AssertionError(f"unhandled scheduler config {cfg!r}")


def _cmaes(cfg: CmaEsConfig) -> optuna.samplers.BaseSampler:
    try:
        import cmaes  # noqa: F401
    except ImportError:
        raise ConfigError(
            "scheduler.type: 'cmaes' needs the 'cmaes' package (pip install cmaes)"
        ) from None
    return optuna.samplers.CmaEsSampler(
        sigma0=cfg.sigma0,
        n_startup_trials=cfg.n_startup_trials,
        popsize=cfg.popsize,
        use_separable_cma=cfg.use_separable_cma,
        with_margin=cfg.with_margin,
        lr_adapt=cfg.lr_adapt,
        consider_pruned_trials=cfg.consider_pruned_trials,
        seed=cfg.seed,
        warn_independent_sampling=False,
    )


def _crossover(cfg: NSGA2Config) -> Any:
    from optuna.samplers import nsgaii

    factories: dict[str, Callable[[], Any]] = {
        "uniform": lambda: nsgaii.UniformCrossover(cfg.swapping_prob),
        "blxalpha": nsgaii.BLXAlphaCrossover,
        "sbx": nsgaii.SBXCrossover,
        "vsbx": nsgaii.VSBXCrossover,
        "undx": nsgaii.UNDXCrossover,
        "spx": nsgaii.SPXCrossover,
    }
    return factories[cfg.crossover]()


def build_pruner(cfg: PrunerConfig) -> optuna.pruners.BasePruner:
    """The Optuna pruner for ``cfg``."""
    if isinstance(cfg, NoPrunerConfig):
        return optuna.pruners.NopPruner()
    if isinstance(cfg, MedianPrunerConfig):
        return optuna.pruners.MedianPruner(
            n_startup_trials=cfg.n_startup_trials,
            n_warmup_steps=cfg.n_warmup_steps,
            interval_steps=cfg.interval_steps,
            n_min_trials=cfg.n_min_trials,
        )
    if isinstance(cfg, PercentilePrunerConfig):
        return optuna.pruners.PercentilePruner(
            cfg.percentile,
            n_startup_trials=cfg.n_startup_trials,
            n_warmup_steps=cfg.n_warmup_steps,
            interval_steps=cfg.interval_steps,
            n_min_trials=cfg.n_min_trials,
        )
    if isinstance(cfg, ASHAConfig):
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=cfg.min_resource,
            reduction_factor=cfg.reduction_factor,
            min_early_stopping_rate=cfg.min_early_stopping_rate,
            bootstrap_count=cfg.bootstrap_count,
        )
    if isinstance(cfg, HyperbandConfig):
        return optuna.pruners.HyperbandPruner(
            min_resource=cfg.min_resource,
            max_resource=cfg.max_resource,
            reduction_factor=cfg.reduction_factor,
            bootstrap_count=cfg.bootstrap_count,
        )
    raise AssertionError(f"unhandled pruner config {cfg!r}")


class TrialSeededSampler(optuna.samplers.BaseSampler):
    """Delegates to ``sampler``, reseeding its random states from (seed, trial, call) first.

    See the module docstring. The random states are found by walking the sampler's attributes
    (Optuna keeps them as ``LazyRandomState`` in ``_rng``, ``_cma_rng`` and in nested samplers
    and strategies); ``random_states()`` lists them so a test can check that some were found.
    """

    def __init__(self, sampler: optuna.samplers.BaseSampler, seed: int) -> None:
        self.sampler = sampler
        self._seed = seed
        self._states = _random_states(sampler)

    def random_states(self) -> list[LazyRandomState]:
        return list(self._states)

    def _reseed(self, trial: FrozenTrial, call: str) -> None:
        for i, state in enumerate(self._states):
            state.rng.seed(derive_seed(self._seed, trial.number, call, i))

    def reseed_rng(self) -> None:
        """No-op: every call is reseeded from the trial number already."""

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return self.sampler.infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        self._reseed(trial, ":relative")
        return self.sampler.sample_relative(study, trial, search_space)

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        self._reseed(trial, param_name)
        return self.sampler.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self._reseed(trial, ":before")
        self.sampler.before_trial(study, trial)

    def after_trial(
        self,
        study: Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self._reseed(trial, ":after")
        self.sampler.after_trial(study, trial, state, values)


def _random_states(root: object) -> list[LazyRandomState]:
    """Every LazyRandomState reachable from ``root`` through optuna/hyperfleet objects."""
    found: list[LazyRandomState] = []
    seen: set[int] = set()
    stack: list[object] = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, LazyRandomState):
            found.append(obj)
            continue
        module = type(obj).__module__
        if not module.startswith(("optuna.", "hyperfleet.")) or not hasattr(obj, "__dict__"):
            continue
        stack.extend(sorted_values(vars(obj)))
    return found


def sorted_values(attrs: dict[str, Any]) -> list[Any]:
    """Attribute values in name order, so the walk (and so the seeds) are deterministic."""
    return [attrs[k] for k in sorted(attrs, reverse=True)]
