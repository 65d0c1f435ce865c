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
  The start-up counts finished trials only, unlike ``gp``'s (``startup.model_ready``): starting
  the model once half of them have finished, with the rest in flight, fits its hyperparameters
  and value transform to five points and freezes them for the pending ones, and measured worse
  in five of the six cells at 2 and 4 in flight (bench_parallel_bo, 10 seeds).
* The optimizer is re-created for every suggestion from the study's COMPLETE trials
  (``max_history`` keeps the best half and the most recent), so any process can suggest from
  storage alone; its random state is derived from ``seed`` and the trial number. The model is
  fitted to the values standardised and, by default, Yeo-Johnson transformed: objectives with
  a long tail of bad values (a loss that diverges, a function 150 times higher at the edges
  than in its basin) otherwise make a GP's fitted length scales collapse, after which the
  acquisition sends trials to the domain's edges. The transform's exponent is capped at 1, so
  it never compresses a long tail of good values (Hartmann-6's), which the model must resolve.

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
suggestion also keeps ``spread.SEPARATION`` from every pending point (``spread``): where the
acquisition's best point is a pending one or beside it, the best point of the acquisition that
is not is taken. The numbers of the pending trials are stored on each suggested trial (user attr
``hyperfleet.pending_trials``). A trial still inside its own suggestion (the model's fit
time) has no point yet and cannot be pending.

The budget's final batch. Given the sweep's trial budget (``n_trials``), the trials whose
results no later suggestion will see (``final_batch``: one at a time the last trial, with
``c`` in flight the last ``c``) are suggested by the lower confidence bound with a small
``kappa`` (``final_kappa``, 0.5) instead of ``acq_func``: they exploit the model, spread by
the kriging believer's pending points. On the six-hump camel it took the median regret at 4
in flight from 4.1 to 1.4 times that one at a time (bench_parallel_bo, 10 seeds).

Cost: a GP fit is O(n^3) in observations. The seconds spent are stored on the trial (user attr
``hyperfleet.suggest_time_s``, with ``hyperfleet.sampler`` = ``skopt`` or ``tpe``). Once the
latest skopt suggestion took longer than ``time_budget_s``, later trials are sampled by TPE,
and the trial gets ``hyperfleet.sampler_fallback`` (a sentence) plus a log warning. A model
error (a space skopt can't fit) falls back for that trial the same way.
``acq_func="gp_hedge"`` chooses among EI, LCB and PI by their past gains; since the optimizer
is rebuilt for each suggestion those gains start at zero, so the choice is uniform. skopt would
still optimise all three acquisitions and keep one; the sampler draws the one first (from the
same seeded random state) and optimises only that: the same choice for a third of the work.

The space codec, the model helpers and a compatibility fix for scikit-optimize with recent
scikit-learn and numpy are in ``skopt_support``.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.search_space import IntersectionSearchSpace
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial, TrialState
from threadpoolctl import threadpool_limits

from hyperfleet.platform.config.schedulers import SkoptConfig
from hyperfleet.platform.schedulers.optuna import internals
from hyperfleet.platform.schedulers.optuna.delegating import DelegatingSampler
from hyperfleet.platform.schedulers.optuna.final_batch import FINAL_KAPPA, in_final_batch
from hyperfleet.platform.schedulers.optuna.skopt_support import (
    Codec,
    derive_seed,
    finite,
    frozen_gp,
    gbrt_quantile,
    spread_out,
    transformed,
)

logger = logging.getLogger(__name__)

ATTR_TIME = "hyperfleet.suggest_time_s"
ATTR_SAMPLER = "hyperfleet.sampler"
ATTR_FALLBACK = "hyperfleet.sampler_fallback"
ATTR_PENDING = "hyperfleet.pending_trials"
_PARAMS_KEY = "hyperfleet.skopt_params"  # system attr: the suggestion, visible to other workers

_CONSTANT_LIES: dict[str, Callable[..., Any]] = {"cl_min": min, "cl_mean": np.mean, "cl_max": max}
LIARS = (*_CONSTANT_LIES, "kriging_believer")


class SkoptSampler(DelegatingSampler):
    """An Optuna sampler driven by ``skopt.Optimizer``; see the module docstring.

    Single-objective only. Arguments are those of ``configs.SkoptConfig``.
    """

    def __init__(
        self,
        *,
        base_estimator: str = "GP",
        acq_func: str = SkoptConfig.model_fields["acq_func"].default,
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
        n_trials: int | None = None,
        final_kappa: float = FINAL_KAPPA,
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
        self._n_trials = n_trials
        self._final_kappa = final_kappa
        super().__init__(
            optuna.samplers.TPESampler(
                seed=seed, n_startup_trials=n_initial_points, constant_liar=True
            )
        )
        self._search_space = IntersectionSearchSpace()
        # In-process bookkeeping per trial id, dropped in after_trial.
        self._skopt_trials: set[int] = set()
        self._tpe_time: dict[int, float] = {}

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return {
            name: d for name, d in self._search_space.calculate(study).items() if not d.single()
        }

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        # single-objective on both paths, as Optuna's samplers are (its TPE fallback would
        # sample a multi-objective study)
        internals.reject_multi_objective(self, study)
        return super().sample_independent(study, trial, param_name, param_distribution)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        internals.reject_multi_objective(self, study)
        if not search_space:
            return {}
        # Fresh from storage, not the per-ask cache: RUNNING trials of other workers count.
        trials = internals.fresh_trials(study)
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
                internals.study_storage(study).set_trial_system_attr(
                    internals.trial_id(trial), _PARAMS_KEY, params
                )
                elapsed = time.perf_counter() - start
                attrs = {ATTR_TIME: elapsed, ATTR_SAMPLER: "skopt", ATTR_PENDING: pending}
                self._set_attrs(study, trial, attrs)
                self._skopt_trials.add(internals.trial_id(trial))
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

        codec = Codec(search_space)
        sign = -1.0 if study.direction == StudyDirection.MAXIMIZE else 1.0
        history = self._history(complete, sign)
        xs = [codec.encode(t.params) for t in history]
        ys = finite(np.array([sign * float(t.value) for t in history]))  # type: ignore[arg-type]
        zs = transformed(ys, self._value_transform)
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
        acq_func, kappa = self._acq_func, self._kappa
        if acq_func == "gp_hedge":  # uniform with no past gains: see the module docstring
            acq_func = ("EI", "LCB", "PI")[rng.randint(3)]
        if in_final_batch(self._n_trials, trials, trial.number):
            acq_func, kappa = "LCB", self._final_kappa
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
                acq_func=acq_func,
                acq_optimizer=acq_optimizer,
                random_state=rng,
                acq_func_kwargs={"xi": self._xi, "kappa": kappa},
                acq_optimizer_kwargs={
                    "n_points": self._n_candidates,
                    "n_restarts_optimizer": self._n_restarts,
                },
            )
            opt.tell(xs + pending, zs + lies)
            x = spread_out(opt, opt.ask(), pending, rng, self._n_candidates)
        return codec.decode(x), [number for number, _ in running]

    def _surrogate(
        self,
        codec: Codec,
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
            model = gbrt_quantile(seed)
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
        return (frozen_gp(model, fitted) if is_gp else model), lies

    def _history(self, complete: list[FrozenTrial], sign: float) -> list[FrozenTrial]:
        cap = self._max_history
        if cap is None or len(complete) <= cap:
            return complete
        by_value = sorted(complete, key=lambda t: sign * float(t.value))  # type: ignore[arg-type]
        best = by_value[: cap // 2]
        kept = {t.number for t in best}
        recent = [t for t in sorted(complete, key=lambda t: -t.number) if t.number not in kept]
        return best + recent[: cap - len(best)]

    def _sampled(self, study: Study, trial: FrozenTrial, seconds: float) -> None:
        tid = internals.trial_id(trial)
        if tid not in self._skopt_trials:
            # TPE made this trial's suggestion (start-up or fallback): its time is the sum.
            spent = self._tpe_time.get(tid, 0.0) + seconds
            self._tpe_time[tid] = spent
            self._set_attrs(study, trial, {ATTR_TIME: spent, ATTR_SAMPLER: "tpe"})

    def _finished(self, trial: FrozenTrial) -> None:
        tid = internals.trial_id(trial)
        self._skopt_trials.discard(tid)
        self._tpe_time.pop(tid, None)

    @staticmethod
    def _set_attrs(study: Study, trial: FrozenTrial, attrs: dict[str, Any]) -> None:
        for key, value in attrs.items():
            internals.study_storage(study).set_trial_user_attr(
                internals.trial_id(trial), key, value
            )


def _running_params(trial: FrozenTrial) -> dict[str, Any]:
    """A running trial's point: its parameters so far, completed by the suggestion stored for
    it (or, for an enqueued trial, the parameters it was enqueued with)."""
    attrs = trial.system_attrs
    return {**attrs.get("fixed_params", {}), **attrs.get(_PARAMS_KEY, {}), **trial.params}
