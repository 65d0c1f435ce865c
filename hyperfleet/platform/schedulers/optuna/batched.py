"""A suggestion in fewer round trips: a new trial without a second read of the history, and
its parameters written in one transaction instead of one each.

:func:`new_trial` is Optuna's ``Study.ask`` for a study with no WAITING trial (the scheduler
has just read the history and seen none): the trial created, then Optuna's ``Trial`` on it;
``ask`` would first read the whole history again (through the cache) to look for a WAITING
trial to pop.

Optuna's ``Trial.suggest_*`` writes every sampled parameter at once through its storage's
``set_trial_param``: on an RDB storage a checkout, a read of the trial's state and an insert,
committed, per dimension. A suggestion is made under the sweep's claim lock, so those round
trips are the fleet's, not one worker's. :func:`sampled` runs the sampling with the trial's
``storage`` (Optuna's ``Trial.storage``, what ``_suggest`` writes through) behind
:class:`_Buffered`, which keeps the parameters, then writes them together: the trial's state
checked (a finished trial refuses, as Optuna's does), the distributions checked against the
ones the study already has (as Optuna's cached storage does), one multi-row insert, one commit.

Anything but ``set_trial_param`` goes to the storage as it is; a storage that is not Optuna's
cache over an RDB storage gets the parameters one by one, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import optuna
from optuna.distributions import BaseDistribution

from hyperfleet.platform.schedulers.optuna import internals

T = TypeVar("T")


class _Buffered:
    """``storage`` with ``set_trial_param`` kept for ``internals.write_params``."""

    def __init__(self, storage: Any) -> None:
        self._storage = storage
        self.params: list[internals.Param] = []

    def set_trial_param(
        self, trial_id: int, name: str, internal: float, distribution: BaseDistribution
    ) -> None:
        self.params.append((name, internal, distribution))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)


def new_trial(study: optuna.Study) -> optuna.Trial:
    """A new RUNNING trial of ``study`` (see the module docstring)."""
    trial_id = internals.study_storage(study).create_new_trial(internals.study_id(study))
    return optuna.Trial(study, trial_id)


def sampled(trial: optuna.Trial, sample: Callable[[optuna.Trial], T]) -> T:
    """``sample(trial)``, the parameters it sampled written in one transaction at the end."""
    storage = trial.storage
    buffered = _Buffered(storage)
    trial.storage = buffered  # type: ignore[assignment]  # a stand-in: set_trial_param kept
    try:
        result = sample(trial)
    finally:
        trial.storage = storage
    internals.write_params(storage, internals.trial_id(trial), buffered.params)
    return result
