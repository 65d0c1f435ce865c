"""An Optuna sampler that hands Optuna's calls to another sampler, with hooks around them.

:class:`~hyperfleet.platform.schedulers.optuna.samplers.TrialSeededSampler` reseeds the sampler
it wraps before every call; :class:`~hyperfleet.platform.schedulers.optuna.skopt_sampler.
SkoptSampler` hands what skopt does not answer to TPE and keeps the time TPE took. Both are a
:class:`DelegatingSampler` that overrides only its hooks (and the calls it answers itself).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState


class DelegatingSampler(optuna.samplers.BaseSampler):
    """Answers each of Optuna's sampler calls by ``inner``'s, calling the hooks around them."""

    def __init__(self, inner: optuna.samplers.BaseSampler) -> None:
        self.inner = inner

    def _enter(self, trial: FrozenTrial, call: str) -> None:
        """Runs before a call reaches ``inner``: ``call`` is ``":relative"``, ``":before"``,
        ``":after"``, or the parameter's name for ``sample_independent``."""

    def _sampled(self, study: Study, trial: FrozenTrial, seconds: float) -> None:
        """Runs after ``inner`` sampled one parameter independently, in ``seconds``."""

    def _finished(self, trial: FrozenTrial) -> None:
        """Runs when ``trial`` has ended, before ``inner`` hears of it."""

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return self.inner.infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        self._enter(trial, ":relative")
        return self.inner.sample_relative(study, trial, search_space)

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        self._enter(trial, param_name)
        start = time.perf_counter()
        value = self.inner.sample_independent(study, trial, param_name, param_distribution)
        self._sampled(study, trial, time.perf_counter() - start)
        return value

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self._enter(trial, ":before")
        self.inner.before_trial(study, trial)

    def after_trial(
        self,
        study: Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self._enter(trial, ":after")
        self._finished(trial)
        self.inner.after_trial(study, trial, state, values)
