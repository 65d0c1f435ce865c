"""The final batch of a trial budget: suggestions whose results no later suggestion will see.

A Bayesian sampler explores because what it learns from a trial improves the trials after it.
Near the end of a budget of ``n_trials`` that stops being true: a trial asked when the trials
still to be asked after it are no more than the trials in flight beside it is, on average,
still running when the last trial is asked, so its result informs nothing; its only use is its
own value. One trial at a time that is the last trial alone; with ``c`` in flight, the last
``c``. The samplers (``gp``, ``skopt``) then maximise an exploiting acquisition, the lower
confidence bound ``mean - kappa * std`` with a small ``kappa`` (minimisation), on the model
that already holds the trials in flight by the kriging believer: their uncertainty is gone.
The believer keeps the model's mean, so the bound's best point can stay on a pending point;
``spread`` then takes the bound's best point that keeps its distance from every trial in
flight, and the batch covers the best region of the model instead of repeating one point.

The rule is the same at every concurrency and needs the budget (``budget.trials``); without
one (a sweep bounded by time only) there is no final batch.
"""

from __future__ import annotations

from optuna.trial import FrozenTrial, TrialState

#: the final batch's exploration weight: ``mean - FINAL_KAPPA * std`` (minimisation), both samplers
FINAL_KAPPA = 0.5

# States of the trials that use a slot of the budget (the scheduler's own count, plus the
# enqueued trials that will use one).
_PLACED = (
    TrialState.COMPLETE,
    TrialState.PRUNED,
    TrialState.FAIL,
    TrialState.RUNNING,
    TrialState.WAITING,
)


def in_final_batch(n_trials: int | None, trials: list[FrozenTrial], number: int) -> bool:
    """Whether trial ``number`` (RUNNING, among ``trials``) is in its budget's final batch.

    ``n_trials``: the budget, None for none; ``trials``: the study's trials, fresh from
    storage (every worker's).
    """
    if n_trials is None:
        return False
    placed = sum(t.state in _PLACED for t in trials)
    running = sum(t.state == TrialState.RUNNING and t.number != number for t in trials)
    return n_trials - placed <= running
