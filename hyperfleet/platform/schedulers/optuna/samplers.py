"""Build Optuna samplers and pruners from their typed configuration.

``build_sampler`` maps each ``scheduler.type`` onto its Optuna sampler through the table
:data:`SAMPLERS`, keyed by the configuration class (``skopt`` onto
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
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial
from pydantic import BaseModel

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config.schedulers import (
    MULTI_OBJECTIVE_TYPES,
    CmaEsConfig,
    GPConfig,
    GridConfig,
    NSGA2Config,
    PrunerConfig,
    QMCConfig,
    RandomConfig,
    SchedulerConfig,
    SkoptConfig,
    TPEConfig,
)
from hyperfleet.platform.schedulers.optuna.delegating import DelegatingSampler
from hyperfleet.platform.schedulers.optuna.gp import PendingAwareGPSampler
from hyperfleet.platform.schedulers.optuna.history import HistoryCappedSampler
from hyperfleet.platform.schedulers.optuna.internals import LazyRandomState, random_states
from hyperfleet.platform.schedulers.optuna.skopt_sampler import SkoptSampler
from hyperfleet.platform.schedulers.optuna.skopt_support import derive_seed
from hyperfleet.spec.trial import TrialConfig

logger = logging.getLogger(__name__)


class AskTellGridSampler(optuna.samplers.GridSampler):
    """Optuna's grid sampler for ask-and-tell use: it stops the study from ``after_trial``,
    which only works inside ``study.optimize``; the sweep loop asks ``is_exhausted`` instead."""

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        return None


class BranchGridSampler(AskTellGridSampler):
    """The grid over a conditional space: Optuna's grid sampler over the indices of its cells
    (``space.cells``, one complete assignment per path through the branch tree), each trial
    answered from its cell. Optuna's grid hands out cell ``grid_id`` to a trial (the first
    trials in order, then an unvisited one at random), so exhaustion, requeues and several
    workers behave as on a flat grid, and no cell of an unchosen branch is ever run."""

    def __init__(self, cells: Sequence[Mapping[str, Any]], seed: int | None = None) -> None:
        super().__init__({CELL: list(range(len(cells)))}, seed=seed)
        self.cells = [dict(c) for c in cells]

    def sample_independent(
        self, study: Any, trial: FrozenTrial, param_name: str, param_distribution: Any
    ) -> Any:
        grid_id = trial.system_attrs.get("grid_id")
        if grid_id is not None:
            return self.cells[int(grid_id)][param_name]
        # an enqueued trial that fixed only some params: a cell that agrees with them
        agree = [
            cell
            for cell in self.cells
            if param_name in cell and all(cell.get(k, v) == v for k, v in trial.params.items())
        ]
        return (agree or [c for c in self.cells if param_name in c])[0][param_name]


CELL = "hyperfleet.cell"
"""The one dimension of ``BranchGridSampler``'s grid (never a param of a trial)."""


def build_sampler(
    cfg: SchedulerConfig,
    grid: Mapping[str, Sequence[Any]] | None = None,
    n_objectives: int = 1,
    n_trials: int | None = None,
    cells: Sequence[Mapping[str, Any]] | None = None,
) -> optuna.samplers.BaseSampler:
    """The Optuna sampler for ``cfg``.

    ``grid`` is the space's grid (needed by ``grid``); ``n_objectives`` the number of
    objectives of the sweep; ``n_trials`` its trial budget, if it has one (``gp`` and
    ``skopt`` exploit in the budget's final batch: ``final_batch``). ``cells`` is given for a
    conditional space (its grid's cells, or an empty list when a dimension is continuous):
    ``grid`` then runs them, and TPE groups the parameters of each branch. Raises ConfigError
    when the type can't handle several objectives or a package it needs is missing.
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
        sampler = _make(cfg, grid, n_trials, cells)
    return sampler if cfg.seed is None else TrialSeededSampler(sampler, cfg.seed)


def learns_from_results(cfg: SchedulerConfig) -> bool:
    """Whether ``cfg``'s sampler reads the results of finished trials: random and QMC points
    depend on the seed and the trial only, a grid on which points were taken."""
    return not isinstance(cfg, (RandomConfig, QMCConfig, GridConfig))


@dataclass(frozen=True)
class _Inputs:
    """What a sampler may need beyond its configuration (``build_sampler``'s arguments)."""

    grid: Mapping[str, Sequence[Any]] | None
    n_trials: int | None
    cells: Sequence[Mapping[str, Any]] | None


_QUIET = {"warn_independent_sampling": False}


def _tpe(cfg: TPEConfig, given: _Inputs) -> optuna.samplers.BaseSampler:
    group = cfg.group if cfg.group is not None else given.cells is not None and cfg.multivariate
    options = _options(cfg, group=group)
    cap = options.pop("max_history")
    tpe = optuna.samplers.TPESampler(**options)
    return tpe if cap is None else HistoryCappedSampler(tpe, cap)


def _grid(cfg: GridConfig, given: _Inputs) -> optuna.samplers.BaseSampler:
    if given.cells:
        return BranchGridSampler(given.cells, **_options(cfg))
    if given.grid is None or given.cells is not None:
        raise ConfigError(
            "scheduler.type: 'grid' needs every space dimension to be categorical or to give a step"
        )
    return AskTellGridSampler(dict(given.grid), **_options(cfg))


def _cmaes(cfg: CmaEsConfig, given: _Inputs) -> optuna.samplers.BaseSampler:
    _need_cmaes()
    return optuna.samplers.CmaEsSampler(**_options(cfg, **_QUIET))


SAMPLERS: dict[type, Callable[[Any, _Inputs], optuna.samplers.BaseSampler]] = {
    TPEConfig: _tpe,
    RandomConfig: lambda cfg, _: optuna.samplers.RandomSampler(**_options(cfg)),
    GridConfig: _grid,
    CmaEsConfig: _cmaes,
    QMCConfig: lambda cfg, _: optuna.samplers.QMCSampler(
        **_options(cfg, **_QUIET, warn_asynchronous_seeding=False)
    ),
    GPConfig: lambda cfg, given: PendingAwareGPSampler(
        **_options(cfg, **_QUIET, n_trials=given.n_trials)
    ),
    NSGA2Config: lambda cfg, _: optuna.samplers.NSGAIISampler(
        **_options(cfg, crossover=_crossover(cfg))
    ),
    SkoptConfig: lambda cfg, given: SkoptSampler(**_options(cfg, n_trials=given.n_trials)),
}
"""Each Optuna-based scheduler configuration (``config/schedulers.py``'s ``SchedulerConfig``
union) to its sampler; ``tests/platform/schedulers/test_registry.py`` checks that every member
of the union has a row."""


def _make(
    cfg: SchedulerConfig,
    grid: Mapping[str, Sequence[Any]] | None,
    n_trials: int | None,
    cells: Sequence[Mapping[str, Any]] | None,
) -> optuna.samplers.BaseSampler:
    make = SAMPLERS.get(type(cfg))
    if make is None:
        raise AssertionError(f"no sampler for scheduler config {cfg!r}: add its row to SAMPLERS")
    return make(cfg, _Inputs(grid, n_trials, cells))


def _options(cfg: BaseModel, **extra: Any) -> dict[str, Any]:
    """``cfg``'s fields but ``type`` — named after the constructor arguments they configure
    (``configs``' module docstring) — as keyword arguments, with ``extra``."""
    return {**cfg.model_dump(exclude={"type"}), **extra}


def _need_cmaes() -> None:
    try:
        import cmaes  # noqa: F401
    except ImportError:
        raise ConfigError(
            "scheduler.type: 'cmaes' needs the 'cmaes' package (pip install cmaes)"
        ) from None


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


def build_pruner(
    cfg: PrunerConfig, first_report: int = 1, last_step: int | None = None
) -> optuna.pruners.BasePruner:
    """The Optuna pruner for ``cfg``. An ``auto`` ``min_resource`` becomes ``first_report``,
    the step of a trial's first report (:func:`first_report`); an ``auto`` ``max_resource``
    becomes ``last_step``, a trial's last step (``trial.steps``), when given.

    Optuna's own ``auto`` waits for a finished trial: ``min_resource`` is then its last step /
    100, which puts several rungs before a trial's first report when a trial reports every few
    percent of its steps (all judged at that report at once, so nearly every trial stops
    there), and Hyperband prunes nothing until then.
    """
    options = _options(cfg)
    if options.get("min_resource") == "auto":
        options["min_resource"] = first_report
    if options.get("max_resource") == "auto" and last_step is not None:
        options["max_resource"] = last_step
    return _PRUNERS[cfg.type](**options)


def first_report(trial: TrialConfig) -> int:
    """The step of a trial's first report: ``ctx.should_eval``'s first true step."""
    return trial.eval_every if trial.steps is None else min(trial.eval_every, trial.steps)


_PRUNERS: dict[str, Callable[..., optuna.pruners.BasePruner]] = {
    "none": optuna.pruners.NopPruner,
    "median": optuna.pruners.MedianPruner,
    "percentile": optuna.pruners.PercentilePruner,
    "asha": optuna.pruners.SuccessiveHalvingPruner,
    "hyperband": optuna.pruners.HyperbandPruner,
}


class TrialSeededSampler(DelegatingSampler):
    """Delegates to ``sampler``, reseeding its random states from (seed, trial, call) first.

    See the module docstring. The random states are found by walking the sampler's attributes
    (Optuna keeps them as ``LazyRandomState`` in ``_rng``, ``_cma_rng`` and in nested samplers
    and strategies); ``random_states()`` lists them so a test can check that some were found.
    """

    def __init__(self, sampler: optuna.samplers.BaseSampler, seed: int) -> None:
        super().__init__(sampler)
        self._seed = seed
        self._states = random_states(sampler)

    def random_states(self) -> list[LazyRandomState]:
        return list(self._states)

    def _enter(self, trial: FrozenTrial, call: str) -> None:
        for i, state in enumerate(self._states):
            state.rng.seed(derive_seed(self._seed, trial.number, call, i))

    def reseed_rng(self) -> None:
        """No-op: every call is reseeded from the trial number already."""
