"""PB2: population-based bandits (Parker-Holder et al., 2020).

PB2 is PBT with a model-based explore. Exploit is PBT's (the bottom quantile copies a member of
the top quantile at a ready check); explore does not perturb the donor's hyperparameters at
random but asks a Gaussian-process bandit where the score improves fastest *now*:

* Data: every ready check of every member gives one point ``(t, h) -> improvement``, the
  change of its score over the interval it just trained with hyperparameters ``h`` (``t`` is the
  step, scores signed so that higher is better). The ``window`` most recent points are used.
* Model: scikit-learn's ``GaussianProcessRegressor`` over ``(t / max_steps, h)`` normalised to
  the unit cube (log parameters in log space), with a constant x anisotropic RBF kernel plus
  white noise. Time is an input dimension, and old points fall out of the window: this stands
  in for the paper's time-varying kernel, which forgets data as training moves on.
* Acquisition: the explored ``h`` maximises the upper confidence bound
  ``mu + ucb_kappa * sigma`` at the current time, over random candidates in the bounds (half of
  them near the donor's ``h``). Members currently training with other ``h`` are added to the
  GP as pseudo-observations at their predicted mean first, so concurrent explores spread out
  (the batch selection of the paper).

Float and int parameters are explored by the bandit; categorical ones by PBT's perturbation.
With fewer than ``min_observations`` points the explore is PBT's. The runtime contract is
PBT's (see :mod:`hyperfleet.platform.schedulers.pbt.scheduler`).
"""

from __future__ import annotations

import logging
import math
import random
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from hyperfleet.platform.config.pbt import PB2Config
from hyperfleet.platform.schedulers.pbt.mutation import explore_params
from hyperfleet.platform.schedulers.pbt.population import Member, MemberState
from hyperfleet.platform.schedulers.pbt.scheduler import PBTScheduler

logger = logging.getLogger(__name__)

__all__ = ["PB2Config", "PB2Scheduler"]


def _to_unit(value: float, spec: Mapping[str, Any]) -> float:
    low, high = float(spec["low"]), float(spec["high"])
    if spec.get("log"):
        value, low, high = math.log(value), math.log(low), math.log(high)
    return 0.0 if high == low else (float(value) - low) / (high - low)


def _from_unit(u: float, spec: Mapping[str, Any]) -> float | int:
    low, high = float(spec["low"]), float(spec["high"])
    u = min(max(u, 0.0), 1.0)
    value = (
        math.exp(math.log(low) + u * (math.log(high) - math.log(low)))
        if spec.get("log")
        else low + u * (high - low)
    )
    value = min(max(value, low), high)
    return round(value) if spec["type"] == "int" else value


class PB2Scheduler(PBTScheduler):
    """PBT whose explore is a time-varying GP-UCB bandit (see the module docstring)."""

    config: PB2Config

    def _explore(
        self, donor: Member, members: Mapping[int, Member], step: int, rng: random.Random
    ) -> dict[str, Any]:
        cfg = self.config
        numeric = [n for n, s in self.space.items() if s["type"] != "categorical"]
        points = sorted(
            (p for m in members.values() for p in m.history if p[1].keys() >= set(numeric)),
            key=lambda p: p[0],
        )[-cfg.window :]
        base = explore_params(
            donor.params, self.space, rng, cfg.resample_probability, cfg.perturbation_factors
        )
        if not numeric or len(points) < cfg.min_observations:
            return base  # too little data for a model: PBT's explore
        x = np.array([self._encode(p[0], p[1], numeric) for p in points])
        y = np.array([float(p[2]) for p in points])
        busy = [
            self._encode(step, m.params, numeric)
            for m in members.values()
            if m.state == MemberState.RUNNING and m.number != donor.number
        ]
        best = self._ucb_argmax(x, y, busy, self._encode(step, donor.params, numeric), rng)
        out = dict(base)  # categoricals keep PBT's move
        for i, name in enumerate(numeric):
            out[name] = _from_unit(float(best[i + 1]), self.space[name])
        return out

    def _encode(self, step: int, params: Mapping[str, Any], names: list[str]) -> list[float]:
        t = step / max(self.max_steps, 1)
        return [t, *(_to_unit(params[n], self.space[n]) for n in names)]

    def _ucb_argmax(
        self,
        x: np.ndarray,
        y: np.ndarray,
        busy: list[list[float]],
        donor: list[float],
        rng: random.Random,
    ) -> np.ndarray:
        """The unit-cube point (time fixed to ``donor``'s) of largest UCB."""
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
        from threadpoolctl import threadpool_limits

        seed = rng.getrandbits(32)
        scale = float(np.std(y)) or 1.0
        y_n = (y - float(np.mean(y))) / scale
        dims = x.shape[1]
        kernel = ConstantKernel(1.0, (1e-2, 1e2)) * RBF(
            np.full(dims, 0.5), (1e-2, 1e2)
        ) + WhiteKernel(1e-2, (1e-6, 1.0))
        gp = GaussianProcessRegressor(kernel, optimizer=_lbfgs, random_state=seed)
        with warnings.catch_warnings(), threadpool_limits(1):  # tiny matrices: one thread
            warnings.simplefilter("ignore", ConvergenceWarning)
            gp.fit(x, y_n)
            if busy:  # pseudo-observations at the predicted mean: spread concurrent explores
                xb = np.array(busy)
                gp = GaussianProcessRegressor(gp.kernel_, optimizer=None, random_state=seed)
                gp.fit(np.vstack([x, xb]), np.concatenate([y_n, gp_mean(gp, x, y_n, xb)]))
        gen = np.random.default_rng(seed)
        n = self.config.n_candidates
        cand = gen.random((n, dims))
        near = np.clip(np.array(donor) + gen.normal(0.0, 0.1, (n // 2, dims)), 0.0, 1.0)
        cand[: n // 2] = near
        cand[:, 0] = donor[0]  # the bandit chooses h for the coming interval, at time t
        with threadpool_limits(1):
            mu, sigma = gp.predict(cand, return_std=True)
        return cand[int(np.argmax(mu + self.config.ucb_kappa * sigma))]


def _lbfgs(obj: Any, theta0: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, float]:
    """sklearn's kernel fit (L-BFGS-B on the log marginal likelihood), capped at 50 iterations."""
    from scipy.optimize import minimize

    res = minimize(obj, theta0, method="L-BFGS-B", jac=True, bounds=bounds, options={"maxiter": 50})
    return res.x, float(res.fun)


def gp_mean(gp: Any, x: np.ndarray, y: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The posterior mean at ``at`` of a GP with fixed kernel fitted on ``(x, y)``."""
    gp.fit(x, y)
    return np.asarray(gp.predict(at))
