"""What a Bayesian sampler reads of a long sweep: at most ``max_history`` finished trials.

TPE's and the GP's cost per suggestion grows with the finished trials they are given (TPE
linearly, the GP's fit cubically), so a 10,000-trial sweep would suggest ever more slowly.
``scheduler.max_history`` caps what they read, as ``skopt``'s ``max_history`` does: the best
half of the cap (by the objective; the most recent for several objectives) plus the most
recent finished trials; every unfinished trial (running, waiting) is kept, since the sampler
spreads new suggestions away from them. Below the cap the sampler sees the whole history and
suggests exactly as without one.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial, TrialState

from hyperfleet.platform.schedulers.optuna import internals
from hyperfleet.platform.schedulers.optuna.delegating import DelegatingSampler


def capped(
    trials: list[FrozenTrial], cap: int, directions: list[StudyDirection]
) -> list[FrozenTrial]:
    """``trials`` with at most ``cap`` finished ones (see the module docstring), by number."""
    finished = [t for t in trials if t.state.is_finished()]
    if len(finished) <= cap:
        return trials
    best: list[FrozenTrial] = []
    if len(directions) == 1:
        sign = -1.0 if directions[0] == StudyDirection.MAXIMIZE else 1.0
        scored = [t for t in finished if t.state == TrialState.COMPLETE and t.values]
        best = sorted(scored, key=lambda t: sign * float(t.values[0]))[: cap // 2]
    kept = {t.number for t in best}
    recent = [t for t in reversed(finished) if t.number not in kept][: cap - len(best)]
    kept.update(t.number for t in recent)
    return [t for t in trials if not t.state.is_finished() or t.number in kept]


class HistoryCappedSampler(DelegatingSampler):
    """``inner`` given at most ``cap`` finished trials when it samples (the module docstring);
    the search space is still inferred from the whole history."""

    def __init__(self, inner: optuna.samplers.BaseSampler, cap: int) -> None:
        super().__init__(inner)
        self.cap = cap

    def _view(self, study: Study) -> Any:
        directions = list(study.directions)
        return internals.HistoryView(study, lambda ts: capped(ts, self.cap, directions))

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return super().sample_relative(self._view(study), trial, search_space)

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        view = self._view(study)
        return super().sample_independent(view, trial, param_name, param_distribution)
