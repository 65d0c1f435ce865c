"""Bayesian optimisation with scikit-optimize, as an Optuna sampler.

Bayesian optimisation fits a cheap surrogate model of the objective (a Gaussian process, or a
forest / boosted trees that also predict a spread) to the finished trials and suggests the point
that maximises an acquisition function such as expected improvement, which trades predicted
value against uncertainty. ``skopt.Optimizer`` does the modelling; this module makes it an
Optuna ``BaseSampler`` so the study's storage, pruners and dashboards work unchanged.

How it maps onto Optuna:

* Relative sampling over the intersection search space (the parameters every finished trial
  has). Floats become ``Real`` (``prior="log-uniform"`` for log parameters), ints ``Integer``,
  stepped floats/ints the ``Integer`` index of their grid, categoricals a ``Categorical`` over
  choice indices. Parameters outside that space, and every parameter of the first
  ``n_initial_points`` trials, come from an internal ``TPESampler`` (random in its start-up).
* The optimizer is re-created for every suggestion from the study's COMPLETE trials
  (``max_history`` keeps the best half and the most recent), so any process can suggest from
  storage alone; its random state is derived from ``seed`` and the trial number. The model is
  fitted to the values standardised and, by default, Yeo-Johnson transformed: objectives with
  a long tail of bad values (a loss that diverges, a function 150 times higher at the edges
  than in its basin) otherwise make a GP's fitted length scales collapse, after which the
  acquisition sends trials to the domain's edges.

Trials in flight. Every RUNNING trial of the study, whichever worker claimed it, is a pending
point, read fresh from storage at each suggestion: its parameters, or the whole suggestion,
which is stored on the trial (system attr ``hyperfleet.skopt_params``) as soon as it is made. A
pending point is told to the optimizer with a made-up value, so it looks known and the next
suggestion moves elsewhere (Ginsbourger et al., 2010, "Kriging is well-suited to parallelize
optimization"). The constant liar tells the best (``cl_min``), mean (``cl_mean``) or worst
(``cl_max``) finished value; the kriging believer (``kriging_believer``, the default) tells the
model's own prediction there, which removes the uncertainty at the point and changes nothing
else. The model is first fitted to the finished trials alone; a GP's hyperparameters (length
scales, amplitude, noise) are then kept fixed while the pending points are added. Refitting
them to invented values, as skopt's own ``ask(n_points)`` does, is what made parallel runs
erratic: a lie far from the data makes the function look rough, the length scales collapse and
the next trials go to the edges. An optimistic lie (``cl_min``) also pulls the next
suggestions next to the pending points, where the model now believes the best value lies. The
numbers of the pending trials are stored on each suggested trial (user attr
``hyperfleet.pending_trials``). A trial still inside its own suggestion (the model's fit
time) has no point yet and cannot be pending.

Cost: a GP fit is O(n^3) in observations. The seconds spent are stored on the trial (user attr
``hyperfleet.suggest_time_s``, with ``hyperfleet.sampler`` = ``skopt`` or ``tpe``). Once the
latest skopt suggestion took longer than ``time_budget_s``, later trials are sampled by TPE,
and the trial gets ``hyperfleet.sampler_fallback`` (a sentence) plus a log warning. A model
error (a space skopt can't fit) falls back for that trial the same way.
``acq_func="gp_hedge"`` chooses among EI, LCB and PI by their past gains; since the optimizer
is rebuilt for each suggestion those gains start at zero, so the choice is uniform.

Compatibility fix for scikit-optimize 0.10.2 with scikit-learn >= 1.6: skopt's
``GradientBoostingQuantileRegressor`` lists ``BaseEstimator`` before ``RegressorMixin``, so
scikit-learn's tag-based ``is_regressor`` says no and ``base_estimator="GBRT"`` fails with "has
to be a regressor". ``_GBRTQuantile`` overrides its tags, and its ``predict(return_std=True)``,
which calls ``np.in1d`` (removed in numpy 2.4). numpy 2 scalars
(``np.int64``, ``np.str_``) coming back from ``ask`` are converted to Python values.
"""

from __future__ import annotations

import functools
import logging
import time
import warnings
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.search_space import IntersectionSearchSpace
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial, TrialState
from threadpoolctl import threadpool_limits

logger = logging.getLogger(__name__)

ATTR_TIME = "hyperfleet.suggest_time_s"
ATTR_SAMPLER = "hyperfleet.sampler"
ATTR_FALLBACK = "hyperfleet.sampler_fallback"
ATTR_PENDING = "hyperfleet.pending_trials"
_PARAMS_KEY = "hyperfleet.skopt_params"  # system attr: the suggestion, visible to other workers

_CONSTANT_LIES: dict[str, Callable[..., Any]] = {"cl_min": min, "cl_mean": np.mean, "cl_max": max}
LIARS = (*_CONSTANT_LIES, "kriging_believer")


@functools.cache
def _gbrt_class() -> type:
    from sklearn.utils import RegressorTags
    from skopt.learning import GradientBoostingQuantileRegressor

    class _GBRTQuantile(GradientBoostingQuantileRegressor):  # type: ignore[misc]
        """skopt's GBRT quantile regressor, tagged as a regressor for scikit-learn >= 1.6."""

        def __sklearn_tags__(self) -> Any:
            tags = super().__sklearn_tags__()
            tags.estimator_type = "regressor"
            tags.regressor_tags = RegressorTags()
            return tags

        def predict(
            self,
            X: Any,  # noqa: N803 - scikit-learn's argument name
            return_std: bool = False,
            return_quantiles: bool = False,
        ) -> Any:
            if not return_std or return_quantiles:
                return super().predict(X, return_quantiles=return_quantiles)
            # skopt's own return_std path calls np.in1d, removed in numpy 2.4.
            if not {0.16, 0.5, 0.84} <= set(self.quantiles):
                raise ValueError("return_std needs the quantiles 0.16, 0.5 and 0.84")
            low, mid, high = (
                self.regressors_[self.quantiles.index(q)].predict(X) for q in (0.16, 0.5, 0.84)
            )
            return mid, (high - low) / 2.0

    return _GBRTQuantile


def _gbrt_quantile(random_state: int) -> Any:
    from sklearn.ensemble import GradientBoostingRegressor

    gbrt = GradientBoostingRegressor(n_estimators=30, loss="quantile")
    return _gbrt_class()(base_estimator=gbrt, random_state=random_state)


def derive_seed(seed: int, *parts: int | str) -> int:
    """A 32-bit seed from ``seed`` and ``parts`` (trial number, parameter name, ...)."""
    words = [seed & 0xFFFFFFFF, seed >> 32 & 0xFFFFFFFF]
    words += [p if isinstance(p, int) else zlib.crc32(p.encode()) for p in parts]
    return int(np.random.SeedSequence(words).generate_state(1)[0])


class _Codec:
    """Converts between Optuna parameter values and skopt dimension values."""

    def __init__(self, space: dict[str, BaseDistribution]) -> None:
        from skopt.space import Categorical, Integer, Real

        self.names = sorted(space)
        self.dists: list[Any] = [space[n] for n in self.names]  # Optuna distributions
        self.dimensions: list[Any] = []
        for d in self.dists:
            if isinstance(d, CategoricalDistribution):
                self.dimensions.append(Categorical([str(i) for i in range(len(d.choices))]))
            elif d.step is not None and d.step != 1:
                n_steps = round((d.high - d.low) / d.step)
                self.dimensions.append(Integer(0, n_steps))
            elif isinstance(d, IntDistribution):
                self.dimensions.append(Integer(d.low, d.high, prior=_prior(d.log)))
            elif isinstance(d, FloatDistribution):
                self.dimensions.append(Real(d.low, d.high, prior=_prior(d.log)))
            else:
                raise TypeError(f"unsupported distribution {d!r}")
        self.has_categorical = any(isinstance(d, CategoricalDistribution) for d in self.dists)

    def encode(self, params: dict[str, Any]) -> list[Any]:
        out: list[Any] = []
        for name, d in zip(self.names, self.dists, strict=True):
            v = params[name]
            if isinstance(d, CategoricalDistribution):
                out.append(str(d.choices.index(v)))
            elif d.step is not None and d.step != 1:
                out.append(round((v - d.low) / d.step))
            elif isinstance(d, IntDistribution):
                out.append(int(v))
            else:
                out.append(float(v))
        return out

    def decode(self, x: Sequence[Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, d, v in zip(self.names, self.dists, x, strict=True):
            if isinstance(d, CategoricalDistribution):
                out[name] = d.choices[int(v)]
            elif d.step is not None and d.step != 1:
                value = d.low + int(v) * d.step
                out[name] = min(max(value, d.low), d.high)
                if isinstance(d, IntDistribution):
                    out[name] = int(out[name])
            elif isinstance(d, IntDistribution):
                out[name] = int(min(max(int(v), d.low), d.high))
            else:
                out[name] = float(min(max(float(v), d.low), d.high))
        return out


def _prior(log: bool) -> str:
    return "log-uniform" if log else "uniform"


class SkoptSampler(optuna.samplers.BaseSampler):
    """An Optuna sampler driven by ``skopt.Optimizer``; see the module docstring.

    Single-objective only. Arguments are those of ``configs.SkoptConfig``.
    """

    def __init__(
        self,
        *,
        base_estimator: str = "GP",
        acq_func: str = "EI",
        n_initial_points: int = 10,
        liar: str = "kriging_believer",
        max_history: int | None = None,
        time_budget_s: float | None = None,
        n_candidates: int = 2000,
        acq_optimizer: str = "auto",
        n_restarts_optimizer: int = 5,
        xi: float = 0.01,
        kappa: float = 1.96,
        value_transform: str = "yeo-johnson",
        seed: int | None = None,
    ) -> None:
        if liar not in LIARS:
            raise ValueError(f"liar must be one of {', '.join(LIARS)}, got {liar!r}")
        self._base_estimator = base_estimator
        self._acq_func = acq_func
        self._n_initial_points = n_initial_points
        self._liar = liar
        self._max_history = max_history
        self._time_budget_s = time_budget_s
        self._n_candidates = n_candidates
        self._acq_optimizer = acq_optimizer
        self._n_restarts = n_restarts_optimizer
        self._xi = xi
        self._kappa = kappa
        self._value_transform = value_transform
        self._seed = seed
        self._tpe = optuna.samplers.TPESampler(
            seed=seed, n_startup_trials=n_initial_points, constant_liar=True
        )
        self._search_space = IntersectionSearchSpace()
        # In-process bookkeeping per trial id, dropped in after_trial.
        self._skopt_trials: set[int] = set()
        self._tpe_time: dict[int, float] = {}

    def reseed_rng(self) -> None:
        self._tpe.reseed_rng()

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return {
            name: d for name, d in self._search_space.calculate(study).items() if not d.single()
        }

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        self._raise_error_if_multi_objective(study)
        if not search_space:
            return {}
        # Fresh from storage, not the per-ask cache: RUNNING trials of other workers count.
        trials = study._get_trials(deepcopy=False, use_cache=False)
        complete = [
            t
            for t in trials
            if t.state == TrialState.COMPLETE and all(n in t.params for n in search_space)
        ]
        if len(complete) < self._n_initial_points:
            return {}
        reason = self._over_budget(trials)
        if reason is None:
            start = time.perf_counter()
            try:
                params, pending = self._ask(study, trial, search_space, complete, trials)
            except (ValueError, np.linalg.LinAlgError) as exc:
                reason = f"skopt could not suggest ({type(exc).__name__}: {exc}); used TPE"
            else:
                study._storage.set_trial_system_attr(trial._trial_id, _PARAMS_KEY, params)
                elapsed = time.perf_counter() - start
                attrs = {ATTR_TIME: elapsed, ATTR_SAMPLER: "skopt", ATTR_PENDING: pending}
                self._set_attrs(study, trial, attrs)
                self._skopt_trials.add(trial._trial_id)
                return params
        logger.warning("trial %d: %s", trial.number, reason)
        self._set_attrs(study, trial, {ATTR_FALLBACK: reason})
        return {}

    def _over_budget(self, trials: list[FrozenTrial]) -> str | None:
        if self._time_budget_s is None:
            return None
        for t in reversed(trials):
            if t.user_attrs.get(ATTR_SAMPLER) == "skopt" and ATTR_TIME in t.user_attrs:
                spent = float(t.user_attrs[ATTR_TIME])
                if spent > self._time_budget_s:
                    return (
                        f"skopt suggestion for trial {t.number} took {spent:.2f} s, over "
                        f"time_budget_s={self._time_budget_s:g}; sampling with TPE from now on"
                    )
                return None
        return None

    def _ask(
        self,
        study: Study,
        trial: FrozenTrial,
        search_space: dict[str, BaseDistribution],
        complete: list[FrozenTrial],
        trials: list[FrozenTrial],
    ) -> tuple[dict[str, Any], list[int]]:
        """The suggestion for ``trial`` and the numbers of the trials it took as pending."""
        from skopt import Optimizer

        codec = _Codec(search_space)
        sign = -1.0 if study.direction == StudyDirection.MAXIMIZE else 1.0
        history = self._history(complete, sign)
        xs = [codec.encode(t.params) for t in history]
        ys = _finite(np.array([sign * float(t.value) for t in history]))  # type: ignore[arg-type]
        zs = _transformed(ys, self._value_transform)
        running = [
            (t.number, params)
            for t in trials
            if t.state == TrialState.RUNNING and t.number != trial.number
            for params in [_running_params(t)]
            if all(n in params for n in search_space)
        ]
        pending = [codec.encode(params) for _, params in running]
        rng = np.random.RandomState(
            None if self._seed is None else derive_seed(self._seed, trial.number, "skopt")
        )
        acq_optimizer = self._acq_optimizer
        if acq_optimizer == "auto":
            use_lbfgs = self._base_estimator == "GP" and not codec.has_categorical
            acq_optimizer = "lbfgs" if use_lbfgs else "sampling"
        # The matrices are small: BLAS threads only contend (4x slower on a busy 2-core box).
        with warnings.catch_warnings(), threadpool_limits(limits=1):
            warnings.simplefilter("ignore")
            model, lies = self._surrogate(codec, xs, zs, pending, rng)
            opt = Optimizer(
                codec.dimensions,
                base_estimator=model,
                n_initial_points=0,
                acq_func=self._acq_func,
                acq_optimizer=acq_optimizer,
                random_state=rng,
                acq_func_kwargs={"xi": self._xi, "kappa": self._kappa},
                acq_optimizer_kwargs={
                    "n_points": self._n_candidates,
                    "n_restarts_optimizer": self._n_restarts,
                },
            )
            opt.tell(xs + pending, zs + lies)
            x = opt.ask()
        return codec.decode(x), [number for number, _ in running]

    def _surrogate(
        self,
        codec: _Codec,
        xs: list[list[Any]],
        zs: list[float],
        pending: list[list[Any]],
        rng: np.random.RandomState,
    ) -> tuple[Any, list[float]]:
        """The unfitted model skopt fits to ``xs + pending``, and the values lied for pending.

        Without pending points that is the plain model. With them, the model is fitted to the
        finished trials first (for the kriging believer's predictions, and for a GP's
        hyperparameters, which the returned model then keeps fixed: see the module docstring).
        """
        from sklearn.base import clone
        from skopt.space import Space
        from skopt.utils import cook_estimator, normalize_dimensions

        is_gp = self._base_estimator == "GP"
        seed = int(rng.randint(0, 2**31 - 1))
        if self._base_estimator == "GBRT":
            model = _gbrt_quantile(seed)
        else:
            model = cook_estimator(self._base_estimator, space=codec.dimensions, random_state=seed)
        if is_gp:
            model.set_params(normalize_y=False)  # the values come standardised (module doc)
        if not pending:
            return model, []
        if self._liar in _CONSTANT_LIES and not is_gp:
            return model, [float(_CONSTANT_LIES[self._liar](zs))] * len(pending)
        # skopt fits a GP in the unit cube (normalize_dimensions) and other models as given.
        space = Space(normalize_dimensions(codec.dimensions) if is_gp else codec.dimensions)
        fitted = clone(model).fit(space.transform(xs), zs)
        if self._liar in _CONSTANT_LIES:
            lies = [float(_CONSTANT_LIES[self._liar](zs))] * len(pending)
        else:
            lies = [float(v) for v in fitted.predict(space.transform(pending))]
        return (_frozen_gp(model, fitted) if is_gp else model), lies

    def _history(self, complete: list[FrozenTrial], sign: float) -> list[FrozenTrial]:
        cap = self._max_history
        if cap is None or len(complete) <= cap:
            return complete
        by_value = sorted(complete, key=lambda t: sign * float(t.value))  # type: ignore[arg-type]
        best = by_value[: cap // 2]
        kept = {t.number for t in best}
        recent = [t for t in sorted(complete, key=lambda t: -t.number) if t.number not in kept]
        return best + recent[: cap - len(best)]

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        start = time.perf_counter()
        value = self._tpe.sample_independent(study, trial, param_name, param_distribution)
        if trial._trial_id not in self._skopt_trials:
            # TPE made this trial's suggestion (start-up or fallback): its time is the sum.
            spent = self._tpe_time.get(trial._trial_id, 0.0) + time.perf_counter() - start
            self._tpe_time[trial._trial_id] = spent
            self._set_attrs(study, trial, {ATTR_TIME: spent, ATTR_SAMPLER: "tpe"})
        return value

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self._tpe.before_trial(study, trial)

    def after_trial(
        self,
        study: Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self._skopt_trials.discard(trial._trial_id)
        self._tpe_time.pop(trial._trial_id, None)
        self._tpe.after_trial(study, trial, state, values)

    @staticmethod
    def _set_attrs(study: Study, trial: FrozenTrial, attrs: dict[str, Any]) -> None:
        for key, value in attrs.items():
            study._storage.set_trial_user_attr(trial._trial_id, key, value)


def _running_params(trial: FrozenTrial) -> dict[str, Any]:
    """A running trial's point: its parameters so far, completed by the suggestion stored for
    it (or, for an enqueued trial, the parameters it was enqueued with)."""
    attrs = trial.system_attrs
    return {**attrs.get("fixed_params", {}), **attrs.get(_PARAMS_KEY, {}), **trial.params}


def _frozen_gp(template: Any, fitted: Any) -> Any:
    """``template`` with ``fitted``'s kernel hyperparameters, learned noise included, fixed.

    skopt's GP (``noise="gaussian"``) fits ``amplitude * Matern + WhiteKernel`` and afterwards
    moves the white noise level into ``noise_``; it is put back as a fixed WhiteKernel.
    """
    from sklearn.base import clone
    from skopt.learning.gaussian_process.kernels import Sum, WhiteKernel

    kernel = fitted.kernel_
    assert isinstance(kernel, Sum) and isinstance(kernel.k2, WhiteKernel), kernel
    noise = WhiteKernel(noise_level=fitted.noise_, noise_level_bounds="fixed")
    return clone(template).set_params(kernel=kernel.k1 + noise, optimizer=None)


def _transformed(ys: np.ndarray, transform: str) -> list[float]:
    """``ys`` standardised, after a Yeo-Johnson power transform if ``transform`` says so."""
    if float(ys.std()) == 0.0:
        return [0.0] * len(ys)
    zs = (ys - ys.mean()) / ys.std()
    if transform == "yeo-johnson":
        from sklearn.preprocessing import PowerTransformer

        zs = PowerTransformer(method="yeo-johnson").fit_transform(zs.reshape(-1, 1))[:, 0]
    return [float(z) for z in zs]


def _finite(ys: np.ndarray) -> np.ndarray:
    """Replace +-inf by the largest / smallest finite value (a GP can't fit infinities)."""
    finite = ys[np.isfinite(ys)]
    if finite.size == 0:
        return np.zeros_like(ys)
    return np.nan_to_num(ys, nan=finite.max(), posinf=finite.max(), neginf=finite.min())
