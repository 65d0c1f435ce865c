"""The parts of the skopt sampler that do not touch Optuna's study: the codec between Optuna
distributions and skopt dimensions, seed derivation, the surrogate's value transform and fixed-
hyperparameter GP, and a compatibility fix.

Compatibility fix for scikit-optimize 0.10.2 with scikit-learn >= 1.6: skopt's
``GradientBoostingQuantileRegressor`` lists ``BaseEstimator`` before ``RegressorMixin``, so
scikit-learn's tag-based ``is_regressor`` says no and ``base_estimator="GBRT"`` fails with "has
to be a regressor". ``_GBRTQuantile`` overrides its tags, and its ``predict(return_std=True)``,
which calls ``np.in1d`` (removed in numpy 2.4). numpy 2 scalars
(``np.int64``, ``np.str_``) coming back from ``ask`` are converted to Python values.
"""

from __future__ import annotations

import copy
import functools
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from hyperfleet.platform.schedulers.optuna import spread


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


def gbrt_quantile(random_state: int) -> Any:
    from sklearn.ensemble import GradientBoostingRegressor

    gbrt = GradientBoostingRegressor(n_estimators=30, loss="quantile")
    return _gbrt_class()(base_estimator=gbrt, random_state=random_state)


def derive_seed(seed: int, *parts: int | str) -> int:
    """A 32-bit seed from ``seed`` and ``parts`` (trial number, parameter name, ...)."""
    words = [seed & 0xFFFFFFFF, seed >> 32 & 0xFFFFFFFF]
    words += [p if isinstance(p, int) else zlib.crc32(p.encode()) for p in parts]
    return int(np.random.SeedSequence(words).generate_state(1)[0])


class Codec:
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


def frozen_gp(template: Any, fitted: Any) -> Any:
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


def transformed(ys: np.ndarray, transform: str) -> list[float]:
    """``ys`` (losses, lower better) standardised, after a Yeo-Johnson power transform if
    ``transform`` says so.

    The transform is there for a long tail of *bad* values, which it compresses (its fitted
    exponent is then below 1: concave). Where the long tail is of good values (Hartmann-6:
    most values near 0, the few good ones down to -3.3) the fitted exponent is above 1 and
    would compress the good values, the ones the model must tell apart: there the exponent is
    capped at 1, which is no transform (plain standardisation).
    """
    if float(ys.std()) == 0.0:
        return [0.0] * len(ys)
    zs = (ys - ys.mean()) / ys.std()
    if transform == "yeo-johnson":
        from sklearn.preprocessing import PowerTransformer

        power = PowerTransformer(method="yeo-johnson").fit(zs.reshape(-1, 1))
        if float(power.lambdas_[0]) < 1.0:
            zs = power.transform(zs.reshape(-1, 1))[:, 0]
    return [float(z) for z in zs]


def finite(ys: np.ndarray) -> np.ndarray:
    """Replace +-inf by the largest / smallest finite value (a GP can't fit infinities)."""
    finite = ys[np.isfinite(ys)]
    if finite.size == 0:
        return np.zeros_like(ys)
    return np.nan_to_num(ys, nan=finite.max(), posinf=finite.max(), neginf=finite.min())


def spread_out(
    opt: Any, x: list[Any], pending: list[list[Any]], rng: np.random.RandomState, n: int
) -> list[Any]:
    """``x``, the point ``opt`` (a fitted ``skopt.Optimizer``) asked for, or, when it lies
    within ``spread.SEPARATION`` of a ``pending`` point, the best point by ``opt``'s
    acquisition among ``n`` random points and points around ``x`` that keep that distance
    from every pending point (``spread``). Distances are taken in the unit box of the space
    (``normalize_dimensions``: a categorical's one-hot columns differ by 1)."""
    from skopt.acquisition import _gaussian_acquisition
    from skopt.space import Integer, Real
    from skopt.utils import normalize_dimensions

    if not pending:
        return x
    # a copy: normalize_dimensions changes the transformers of the dimensions it is given
    unit = normalize_dimensions(copy.deepcopy(opt.space.dimensions))
    away = np.asarray(unit.transform(pending), dtype=float)
    ux = np.asarray(unit.transform([x]), dtype=float)[0]
    if not spread.crowded(ux, away, None):
        return x
    free = np.concatenate(
        [np.full(d.transformed_size, isinstance(d, Real | Integer)) for d in unit.dimensions]
    )
    points = opt.space.rvs(n, random_state=rng) + unit.inverse_transform(
        spread.around(ux, free, rng)
    )
    scores = -_gaussian_acquisition(  # skopt's acquisitions are minimised
        X=np.asarray(opt.space.transform(points)),
        model=opt.models[-1],
        y_opt=np.min(opt.yi),
        acq_func=opt.acq_func,
        acq_func_kwargs=opt.acq_func_kwargs,
    )
    best = spread.best_apart(np.asarray(unit.transform(points), dtype=float), scores, away, None)
    return x if best is None else list(points[best])
