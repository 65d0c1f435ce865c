"""Typed configuration of the schedulers and pruners (the ``scheduler:`` and ``pruner:`` keys).

Each scheduler type is one frozen pydantic model; ``SchedulerConfig`` is their union,
discriminated by ``type``, so an unknown type or a misspelt option is an error naming the field.
The same holds for ``PrunerConfig``. The fields mirror the constructor arguments of the Optuna
sampler or pruner they configure (``samplers.build_sampler`` / ``build_pruner`` map them), and
``SkoptConfig`` those of ``skopt.Optimizer`` plus the platform's own cost controls.

:mod:`~hyperfleet.platform.config.scheduler_parsing` validates raw mappings against them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)

Seed = Annotated[
    int | None,
    Field(
        description="Seed of the sampler's random numbers. With a seed, the suggestion for "
        "trial N depends only on the seed, N and the study's history, so a run is "
        "reproducible and a resumed sweep does not replay its first suggestions. "
        "None: fresh randomness.",
    ),
]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


# --------------------------------------------------------------------------- schedulers


class TPEConfig(_Frozen):
    """Tree-structured Parzen Estimator (Optuna's ``TPESampler``); single- and multi-objective."""

    type: Literal["tpe"]
    seed: Seed = None
    n_startup_trials: int = Field(10, ge=0)
    """Trials sampled at random before TPE starts modelling."""
    n_ei_candidates: int = Field(24, ge=1)
    """Candidates drawn from the good-trials density; the one with the best ratio is chosen."""
    multivariate: bool = True
    """Model the parameters jointly (captures interactions) instead of one by one. On by
    default, unlike Optuna: on Branin it reaches 0.48 in 60 trials where univariate TPE
    stalls at 0.76 (seed 0)."""
    group: bool | None = None
    """With ``multivariate``, model each group of parameters that always occur together (the
    branches of a conditional space); None: on for a conditional space, off otherwise."""
    constant_liar: bool = True
    """Treat running trials as bad results so concurrent suggestions spread out."""
    max_history: int | None = Field(500, ge=2)
    """At most this many finished trials are given to TPE at a suggestion (the best half of
    them plus the most recent ones; every running trial too): a suggestion's cost stops
    growing with the sweep's length. None: all."""


class RandomConfig(_Frozen):
    """Independent uniform sampling (log-uniform for log parameters); the baseline."""

    type: Literal["random"]
    seed: Seed = None


class GridConfig(_Frozen):
    """Exhaustive grid; every dimension of the space must be categorical or give ``step``."""

    type: Literal["grid"]
    seed: Seed = None


class CmaEsConfig(_Frozen):
    """CMA-ES (Optuna's ``CmaEsSampler``; needs the ``cmaes`` package).

    Float and int parameters only: categorical ones are sampled at random by the independent
    sampler. Single-objective only.
    """

    type: Literal["cmaes"]
    seed: Seed = None
    sigma0: float | None = Field(None, gt=0)
    """Initial step size; None: a sixth of the smallest parameter range."""
    n_startup_trials: int = Field(1, ge=0)
    """Trials sampled by the independent sampler before CMA-ES starts."""
    popsize: int | None = Field(None, ge=2)
    """Population size per generation; None: CMA-ES's default ``4 + 3 ln(dim)``."""
    use_separable_cma: bool = False
    """Diagonal covariance only (sep-CMA-ES): faster in high dimension, blind to correlations."""
    with_margin: bool = False
    """CMA-ES with margin, which keeps discrete (int/step) parameters from collapsing."""
    lr_adapt: bool = False
    """Adapt the learning rate (LRA-CMA-ES), for noisy or multimodal objectives."""
    consider_pruned_trials: bool = False
    """Use the last reported value of pruned trials as their result."""

    @field_validator("with_margin")
    @classmethod
    def _margin(cls, v: bool, info: ValidationInfo) -> bool:
        if v and info.data.get("use_separable_cma"):
            raise ValueError("cannot be true together with use_separable_cma")
        return v

    @field_validator("lr_adapt")
    @classmethod
    def _lra(cls, v: bool, info: ValidationInfo) -> bool:
        if v and (info.data.get("use_separable_cma") or info.data.get("with_margin")):
            raise ValueError("cannot be true together with use_separable_cma or with_margin")
        return v


class QMCConfig(_Frozen):
    """Quasi-Monte Carlo points (Optuna's ``QMCSampler``): low-discrepancy, space-filling.

    Float and int parameters follow the sequence; categorical ones are sampled at random.
    """

    type: Literal["qmc"]
    seed: Seed = None
    qmc_type: Literal["sobol", "halton"] = "sobol"
    """The low-discrepancy sequence."""
    scramble: bool = False
    """Randomise the sequence (Owen scrambling), seeded by ``seed``."""


class GPConfig(_Frozen):
    """Gaussian-process Bayesian optimisation (Optuna's ``GPSampler``, needs torch).

    Handles float, int and categorical parameters; single- and multi-objective (the latter
    maximises expected hypervolume improvement). Every RUNNING trial, of any worker, is a
    pending point, read from storage at each suggestion (``gp_sampler``).
    """

    type: Literal["gp"]
    seed: Seed = None
    n_startup_trials: int = Field(10, ge=0)
    """Trials sampled at random before the GP is fitted; trials in flight count (the GP takes
    over once this many are placed and half of them have finished)."""
    deterministic_objective: bool = False
    """The objective has no noise: fit the GP with (almost) zero noise."""
    pending: Literal["kriging_believer", "qlogei"] = "kriging_believer"
    """How trials in flight shape the next suggestion (single objective, unconstrained):
    ``kriging_believer`` conditions the GP on them with its own prediction as their value and
    maximises LogEI; ``qlogei`` is Optuna's batch acquisition over fantasies drawn at them."""
    value_transform: Literal["yeo-johnson", "standardize"] = "yeo-johnson"
    """As skopt's: the GP (single objective) is fitted to the values Yeo-Johnson transformed and
    standardised, or only standardised (Optuna's; a long tail of bad values sets its scale)."""
    max_history: int | None = Field(200, ge=2)
    """At most this many finished trials are fitted (the best half of them plus the most
    recent ones): the fit costs O(n^3), so it stops growing with the sweep's length. None:
    all."""


class NSGA2Config(_Frozen):
    """NSGA-II genetic algorithm (Optuna's ``NSGAIISampler``), the multi-objective workhorse."""

    type: Literal["nsga2"]
    seed: Seed = None
    population_size: int = Field(50, ge=2)
    """Trials per generation."""
    crossover: Literal["uniform", "blxalpha", "sbx", "vsbx", "undx", "spx"] = "uniform"
    """How two (or three) parents are combined into a child."""
    crossover_prob: float = Field(0.9, ge=0.0, le=1.0)
    """Probability that a child is made by crossover rather than copied from a parent."""
    mutation_prob: float | None = Field(None, ge=0.0, le=1.0)
    """Probability that a parameter is resampled; None: ``1 / number of parameters``."""
    swapping_prob: float = Field(0.5, ge=0.0, le=1.0)
    """Uniform crossover: probability of taking each parameter from the other parent."""


class SkoptConfig(_Frozen):
    """Bayesian optimisation with scikit-optimize's ``Optimizer`` (``skopt_sampler``).

    A surrogate model of the objective (``base_estimator``) is fitted to the finished trials and
    the point maximising the acquisition function is suggested. Running trials, from any
    worker, are pending points given a made-up value (``liar``) so concurrent suggestions
    spread out. The fit costs O(n^3) in the number of observations for GP: ``max_history``
    caps it, ``time_budget_s`` turns to TPE.
    """

    type: Literal["skopt"]
    seed: Seed = None
    base_estimator: Literal["GP", "RF", "ET", "GBRT"] = "GP"
    """Surrogate model: Gaussian process, random forest, extra trees, gradient-boosted trees."""
    acq_func: Literal["EI", "PI", "LCB", "gp_hedge"] = "gp_hedge"
    """Acquisition: expected/probability of improvement, lower confidence bound, or a
    portfolio of the three chosen by past gains (gp_hedge)."""
    n_initial_points: int = Field(10, ge=1)
    """Finished trials (sampled by the internal TPE, which is random this early) before the
    surrogate is used."""
    liar: Literal["cl_min", "cl_mean", "cl_max", "kriging_believer"] = "kriging_believer"
    """What a running trial (pending point) is taken to score while the next suggestion is
    made, so that concurrent suggestions spread out. ``kriging_believer``: the model's own
    prediction there (only the uncertainty at the point goes; the best choice with many
    workers in bench_parallel_bo). ``cl_min`` / ``cl_mean`` / ``cl_max``: the constant liar,
    the best, mean or worst finished value; ``cl_max`` pushes concurrent trials apart (more
    exploration), ``cl_min`` pulls them together next to the running ones (more exploitation,
    clusters with many workers). The model's hyperparameters are fitted to finished trials
    only, whatever the lie."""
    max_history: int | None = Field(None, ge=2)
    """At most this many finished trials are given to the surrogate (the best half of them
    plus the most recent ones); None: all."""
    time_budget_s: float | None = Field(None, gt=0)
    """Once one suggestion took longer than this, the sweep's later suggestions come from
    TPE, with a warning in the log and on the trial; None: no limit."""
    n_candidates: int = Field(2000, ge=10)
    """Random points at which the acquisition function is evaluated (skopt's ``n_points``)."""
    acq_optimizer: Literal["auto", "sampling", "lbfgs"] = "auto"
    """How the acquisition is maximised: the best candidate (sampling), or L-BFGS started from
    the best candidates (lbfgs, GP on a space without categoricals only); auto picks."""
    n_restarts_optimizer: int = Field(5, ge=1)
    """L-BFGS starts for acq_optimizer lbfgs."""
    xi: float = Field(0.01, ge=0.0)
    """EI/PI: minimum improvement that counts (exploration), in standard deviations of the
    (transformed) finished values."""
    kappa: float = Field(1.96, ge=0.0)
    """LCB: weight of the standard deviation (exploration)."""
    value_transform: Literal["yeo-johnson", "standardize"] = "yeo-johnson"
    """What the surrogate is fitted to: the finished values standardised, after a Yeo-Johnson
    power transform (default; order-preserving, it tames the long tail of bad values that
    otherwise makes a GP's fitted length scales collapse), or only standardised."""


SchedulerConfig = Annotated[
    TPEConfig
    | RandomConfig
    | GridConfig
    | CmaEsConfig
    | QMCConfig
    | GPConfig
    | NSGA2Config
    | SkoptConfig,
    Field(discriminator="type"),
]

#: Scheduler types whose sampler handles several objectives (others raise ConfigError).
MULTI_OBJECTIVE_TYPES = frozenset({"tpe", "random", "grid", "qmc", "gp", "nsga2"})
#: Population-based scheduler types (``schedulers/pbt``): their trials are PBT members.
POPULATION_TYPES = frozenset({"pbt", "pb2"})
#: Scheduler types that search a conditional space (sub-spaces under a categorical's
#: choices): Optuna's define-by-run samplers, the grid over the branch tree, and PBT/PB2,
#: whose explore keeps a member inside a branch. The others model a fixed set of parameters.
CONDITIONAL_TYPES = frozenset({"tpe", "random", "qmc", "grid", "pbt", "pb2"})


# --------------------------------------------------------------------------- pruners


class NoPrunerConfig(_Frozen):
    """Never prune: every trial runs to its end."""

    type: Literal["none"] = "none"


class _StepPrunerFields(_Frozen):
    n_startup_trials: int = Field(5, ge=0)
    """No pruning until this many trials have finished."""
    n_warmup_steps: int = Field(0, ge=0)
    """No pruning of a trial before it reported this step."""
    interval_steps: int = Field(1, ge=1)
    """Check every this many steps after the warm-up."""
    n_min_trials: int = Field(1, ge=1)
    """Reports needed from other trials at a step before comparing against them."""


class MedianPrunerConfig(_StepPrunerFields):
    """Prune a trial whose best value so far is worse than the median of the other trials'
    values at the same step (Optuna's ``MedianPruner``)."""

    type: Literal["median"]


class PercentilePrunerConfig(_StepPrunerFields):
    """Like ``median`` with another percentile (Optuna's ``PercentilePruner``)."""

    type: Literal["percentile"]
    percentile: float = Field(ge=0.0, le=100.0)
    """Prune when worse than this percentile of the other trials (25: keep the best quarter)."""


class ASHAConfig(_Frozen):
    """Asynchronous successive halving (Optuna's ``SuccessiveHalvingPruner``).

    Rungs sit at steps ``min_resource * reduction_factor ** (min_early_stopping_rate + k)``; a
    trial reaching a rung continues only if it is in the top ``1 / reduction_factor`` of the
    trials that reached that rung.
    """

    type: Literal["asha"]
    min_resource: Literal["auto"] | Annotated[int, Field(ge=1)] = "auto"
    """Steps before the first rung; auto: the step of a trial's first report
    (``trial.eval_every``, or ``trial.steps`` when shorter), so the first rung is judged at
    the first report and each later rung at a later one."""
    reduction_factor: int = Field(4, ge=2)
    """One trial in this many is promoted at each rung."""
    min_early_stopping_rate: int = Field(0, ge=0)
    """Skip this many rungs at the start."""
    bootstrap_count: int = Field(0, ge=0)
    """Trials that must reach a rung before any is promoted past it (needs an int
    min_resource)."""

    @field_validator("bootstrap_count")
    @classmethod
    def _bootstrap(cls, v: int, info: ValidationInfo) -> int:
        if v > 0 and info.data.get("min_resource") == "auto":
            raise ValueError("must be 0 when min_resource is 'auto' (give an integer min_resource)")
        return v


class HyperbandConfig(_Frozen):
    """Hyperband (Optuna's ``HyperbandPruner``): several ASHA brackets with different
    ``min_early_stopping_rate``, trials assigned to brackets by a hash of their number."""

    type: Literal["hyperband"]
    min_resource: Literal["auto"] | Annotated[int, Field(ge=1)] = "auto"
    """Steps before the first rung of the most aggressive bracket; auto: the step of a trial's
    first report, as for ``asha``."""
    max_resource: Literal["auto"] | Annotated[int, Field(ge=1)] = "auto"
    """Steps of a complete trial; auto: ``trial.steps``, a trial's last report."""
    reduction_factor: int = Field(3, ge=2)
    """One trial in this many is promoted at each rung; also sets the number of brackets."""
    bootstrap_count: int = Field(0, ge=0)
    """Trials that must reach a rung before any is promoted (needs an int max_resource)."""

    @field_validator("max_resource")
    @classmethod
    def _max(cls, v: str | int, info: ValidationInfo) -> str | int:
        low = info.data.get("min_resource")
        if isinstance(v, int) and isinstance(low, int) and v < low:
            raise ValueError(f"must be >= min_resource ({low})")
        return v

    @field_validator("bootstrap_count")
    @classmethod
    def _bootstrap(cls, v: int, info: ValidationInfo) -> int:
        if v > 0 and info.data.get("max_resource") == "auto":
            raise ValueError("must be 0 when max_resource is 'auto' (give an integer max_resource)")
        return v


PrunerConfig = Annotated[
    NoPrunerConfig | MedianPrunerConfig | PercentilePrunerConfig | ASHAConfig | HyperbandConfig,
    Field(discriminator="type"),
]
