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

import bisect
import heapq
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


class IncrementalCap:
    """:func:`capped` for one study's history read again and again as it grows (a sampler's,
    at every suggestion): the same trials, in ``O(cap + unfinished + new)`` a read instead of
    ``O(history)``. A finished trial stays finished with its value, so each is ranked once,
    when it is first seen finished, into a heap of the best half. The numbers below the
    highest seen that were not counted yet (unfinished then, or not among the states read:
    a read of COMPLETE and PRUNED trials skips the running ones) are looked up again at each
    read. One instance per ``(study, states read)``."""

    def __init__(self, cap: int, directions: list[StudyDirection]) -> None:
        self.cap = cap
        self.sign = -1.0 if directions == [StudyDirection.MAXIMIZE] else 1.0
        self.ranks = len(directions) == 1  # several objectives: the most recent only
        self.high = 0  # every number below has been looked at
        self.pending: set[int] = set()  # ... and these were not counted: look again
        self.finished = 0
        self.best: list[tuple[float, int, FrozenTrial]] = []  # the worst kept on top

    def _count(self, t: FrozenTrial) -> None:
        self.finished += 1
        if not (self.ranks and t.state == TrialState.COMPLETE and t.values):
            return
        entry = (-self.sign * float(t.values[0]), -t.number, t)
        if len(self.best) < self.cap // 2:
            heapq.heappush(self.best, entry)
        elif entry[:2] > self.best[0][:2]:
            heapq.heapreplace(self.best, entry)

    def __call__(self, trials: list[FrozenTrial]) -> list[FrozenTrial]:
        def number(t: FrozenTrial) -> int:
            return t.number

        unfinished = []
        for n in sorted(self.pending):
            i = bisect.bisect_left(trials, n, key=number)
            if i < len(trials) and trials[i].number == n:
                if trials[i].state.is_finished():
                    self.pending.discard(n)
                    self._count(trials[i])
                else:
                    unfinished.append(trials[i])
        for t in trials[bisect.bisect_left(trials, self.high, key=number) :]:
            self.pending.update(range(self.high, t.number))  # not read: look again later
            self.high = t.number + 1
            if t.state.is_finished():
                self._count(t)
            else:
                self.pending.add(t.number)
                unfinished.append(t)
        if self.finished <= self.cap:
            return trials
        best = [t for _, _, t in self.best]
        kept = {t.number for t in best}
        recent: list[FrozenTrial] = []
        for t in reversed(trials):
            if len(best) + len(recent) >= self.cap:
                break
            if t.state.is_finished() and t.number not in kept:
                recent.append(t)
        return sorted(best + recent + unfinished, key=number)


class HistoryCappedSampler(DelegatingSampler):
    """``inner`` given at most ``cap`` finished trials when it samples (the module docstring);
    the search space is still inferred from the whole history. What it gives is
    :func:`capped`'s, kept up to date as the history grows (:class:`IncrementalCap`)."""

    def __init__(self, inner: optuna.samplers.BaseSampler, cap: int) -> None:
        super().__init__(inner)
        self.cap = cap
        self._caps: dict[tuple[int, Any], IncrementalCap] = {}

    def _keep(self, study: Study, states: Any) -> IncrementalCap:
        key = (internals.study_id(study), None if states is None else tuple(states))
        if key not in self._caps:
            self._caps[key] = IncrementalCap(self.cap, list(study.directions))
        return self._caps[key]

    def _view(self, study: Study) -> Any:
        def keep(trials: list[FrozenTrial], states: Any) -> list[FrozenTrial]:
            return self._keep(study, states)(trials)

        return internals.HistoryView(study, keep)

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
