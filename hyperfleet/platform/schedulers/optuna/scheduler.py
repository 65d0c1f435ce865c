"""Schedulers backed by an Optuna study: the samplers and pruners of ``scheduler:``/``pruner:``.

The study lives in the platform's storage, so this object is cheap to rebuild in any process:
the controller calls ``suggest`` and ``on_trial_end``; rank 0 of a trial calls ``report`` and
``decide`` (Optuna's ``trial.report`` / ``trial.should_prune``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import optuna
from optuna.pruners import NopPruner
from optuna.trial import FrozenTrial
from optuna.trial import TrialState as OptunaState

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config import is_conditional
from hyperfleet.platform.schedulers.base import (
    Capabilities,
    Decision,
    DecisionKind,
    Scheduler,
    Suggestion,
    TrialEnd,
    TrialState,
)
from hyperfleet.platform.schedulers.optuna import batched, internals
from hyperfleet.platform.schedulers.optuna import space as space_mod
from hyperfleet.platform.schedulers.optuna.samplers import (
    TrialSeededSampler,
    build_sampler,
    learns_from_results,
)

if TYPE_CHECKING:
    from optuna.storages import BaseStorage

    from hyperfleet.platform.config.schedulers import SchedulerConfig
    from hyperfleet.platform.config.space import Space

logger = logging.getLogger(__name__)
optuna.logging.set_verbosity(optuna.logging.WARNING)  # our own log says what happens

_COUNTED = (OptunaState.COMPLETE, OptunaState.PRUNED, OptunaState.FAIL, OptunaState.RUNNING)


def study_sampler(
    scheduler: SchedulerConfig, *, space: Space, n_objectives: int, trials: int | None
) -> optuna.samplers.BaseSampler:
    """The study's sampler, built from ``scheduler`` over ``space`` for ``n_objectives`` and
    the trial budget ``trials`` (``ConfigError`` for what it refuses): :func:`open_study` opens
    the study with it, and ``registry.check_scheduler`` builds it before anything of a sweep is
    stored."""
    conditional = is_conditional(space)
    # Only a grid enumerates the space: an int dimension over [0, 2**40] is a list of 2**40
    # values, which another sampler never needs (and memory can't hold).
    gridded = scheduler.type == "grid"
    return build_sampler(
        scheduler,
        grid=space_mod.grid(space) if gridded and not conditional else None,
        n_objectives=n_objectives,
        n_trials=trials,
        cells=((space_mod.cells(space) or []) if gridded else []) if conditional else None,
    )


def open_study(
    name: str,
    storage: Any,
    scheduler: SchedulerConfig,
    *,
    space: Space,
    modes: Sequence[Literal["min", "max"]],
    trials: int | None,
    pruner: optuna.pruners.BasePruner,
    create: bool = False,
) -> optuna.Study:
    """The study ``name`` on Optuna's ``storage`` (``create``: made if new), its sampler built
    from ``scheduler`` over ``space`` for the objectives' ``modes`` (in the study's order) and
    the trial budget ``trials`` (:func:`study_sampler`); ``pruner`` as :func:`.build_pruner`
    builds it."""
    sampler = study_sampler(scheduler, space=space, n_objectives=len(modes), trials=trials)
    storage = internals.lean_storage(storage)  # a claim re-reads running trials only if changed
    if create:
        directions: list[Literal["minimize", "maximize"]] = [
            "maximize" if mode == "max" else "minimize" for mode in modes
        ]
        return optuna.create_study(
            storage=storage,
            study_name=name,
            sampler=sampler,
            pruner=pruner,
            directions=directions,
            load_if_exists=True,
        )
    return optuna.load_study(study_name=name, storage=storage, sampler=sampler, pruner=pruner)


class OptunaScheduler(Scheduler):
    """tpe / random / grid / ... over ``space``, with Optuna's pruners.

    ``config`` is the scheduler's section (``config/schedulers.py``), ``study`` its study
    (:func:`open_study`: its sampler and pruner), ``metrics`` the
    objectives' metrics in the study's order, ``steps`` a trial's last step (never pruned
    there), ``trials`` the trial budget (None: bounded by time only) and ``pruner`` the
    pruner's type, named in a pruned trial's reason."""

    capabilities = Capabilities(enqueue=True, pruning=True, multi_objective=True, ahead=True)

    def __init__(
        self,
        config: SchedulerConfig,
        study: optuna.Study,
        *,
        space: Space,
        metrics: Sequence[str],
        steps: int | None,
        trials: int | None,
        pruner: str = "none",
    ) -> None:
        self.config = config
        self.study = study
        self.space = space
        self.metrics = list(metrics)
        self.steps = steps
        self.trials = trials
        self.pruner = pruner
        self._ids: dict[int, int] = {}

    @property
    def _study_storage(self) -> BaseStorage:
        return internals.study_storage(self.study)

    def _trial_id(self, number: int) -> int:
        if number not in self._ids:
            storage = self._study_storage
            study_id = storage.get_study_id_from_name(self.study.study_name)
            self._ids[number] = storage.get_trial_id_from_study_id_trial_number(study_id, number)
        return self._ids[number]

    def budget_left(self) -> int | None:
        return self._budget_left(self.study.get_trials(deepcopy=False, states=_COUNTED))

    def _budget_left(self, trials: list[FrozenTrial]) -> int | None:
        limit = self.trials
        if limit is None:
            return None
        return max(0, limit - sum(t.state in _COUNTED for t in trials))

    def running(self) -> set[int]:
        """One query of the running trials' numbers (:func:`internals.running_numbers`)."""
        return internals.running_numbers(self.study)

    def running_count(self) -> int:
        """One ``GROUP BY`` of the study's trials instead of reading the running ones."""
        return internals.state_counts(self.study).get(OptunaState.RUNNING, 0)

    def learns_from_results(self) -> bool:
        return learns_from_results(self.config)

    def exhausted(self) -> bool:
        """The budget is used and nothing waits, from one ``GROUP BY`` (the grid's end is
        left to ``suggest``)."""
        counts = internals.state_counts(self.study)
        return counts.get(OptunaState.WAITING, 0) == 0 and self._used_up(counts)

    def _used_up(self, counts: Mapping[OptunaState, int]) -> bool:
        limit = self.trials
        used = sum(n for state, n in counts.items() if state in _COUNTED)
        return limit is not None and used >= limit

    def finished(self) -> bool:
        """Nothing left to run: the budget (or the grid) is used up and no trial is running
        or waiting. A sweep bounded only by ``budget.timeout`` never finishes by itself."""
        trials = self.study.get_trials(deepcopy=False)
        if any(t.state in (OptunaState.RUNNING, OptunaState.WAITING) for t in trials):
            return False
        return self._budget_left(trials) == 0 or self._grid_exhausted()

    def _grid_exhausted(self) -> bool:
        sampler = self.study.sampler
        if isinstance(sampler, TrialSeededSampler):
            sampler = sampler.inner
        return isinstance(sampler, optuna.samplers.GridSampler) and sampler.is_exhausted(self.study)

    def suggest(self) -> Suggestion | None:
        """Under the sweep's claim lock: the trials counted by state in the database (the
        history is read only by a sampler that needs it), a WAITING trial popped by Optuna's
        ``ask``, else a new trial (:mod:`.batched`)."""
        counts = internals.state_counts(self.study)
        waiting = counts.get(OptunaState.WAITING, 0) > 0
        if not waiting and (self._used_up(counts) or self._grid_exhausted()):
            return None
        trial = self.study.ask() if waiting else batched.new_trial(self.study)
        params = batched.sampled(trial, lambda t: space_mod.sample(t, self.space))
        return Suggestion(trial_number=trial.number, params=params)

    def report(self, trial_number: int, step: int, metrics: Mapping[str, float]) -> None:
        """Optuna's intermediate value at ``step`` (written as given: a repeated report of the
        same step stores the same value again, so the call is idempotent)."""
        if len(self.metrics) != 1:
            return  # Optuna keeps no intermediate values for multi-objective studies
        value = metrics.get(self.metrics[0])
        if value is None or not math.isfinite(float(value)):
            return  # kept in the trial's record; a sampler or pruner gets no NaN as a number
        internals.set_intermediate_value(
            self.study, self._trial_id(trial_number), step, float(value)
        )

    def decide(self, trial_number: int, step: int) -> Decision:
        """Optuna's pruner on the trial's report at ``step``. A report at the trial's last
        step (``trial.steps``) is never pruned: the trial trained to its full length and ends
        COMPLETE with its value (a rung that falls there, as ASHA's second does for 200 steps
        reported every 50, would otherwise end it PRUNED with no value; Ray Tune's ASHA
        completes a trial at ``max_t`` likewise)."""
        last = self.steps is not None and step >= self.steps  # None: the program's own length
        if len(self.metrics) != 1 or isinstance(self.study.pruner, NopPruner) or last:
            return Decision.cont()
        # what ``Trial.should_prune`` asks, without building a ``Trial`` (whose constructor
        # runs the sampler's relative search space over the whole history)
        frozen = self._study_storage.get_trial(self._trial_id(trial_number))
        if self.study.pruner.prune(self.study, frozen):
            return Decision(DecisionKind.PRUNE, reason=f"pruned by {self.pruner} at step {step}")
        return Decision.cont()

    def suggestion_info(self, trial_number: int) -> dict[str, str]:
        attrs = self._study_storage.get_trial(self._trial_id(trial_number)).user_attrs
        return {k: str(v) for k, v in attrs.items() if k.startswith("hyperfleet.")}

    def rung(self, trial_number: int) -> int:
        """The rungs ASHA's or Hyperband's pruner recorded the trial completing (its
        ``completed_rung_*`` system attributes); 0 under the other pruners."""
        attrs = self._study_storage.get_trial(self._trial_id(trial_number)).system_attrs
        return sum(1 for key in attrs if key.startswith("completed_rung_"))

    def enqueue(self, params: Mapping[str, Any]) -> int:
        """Optuna's ``enqueue_trial``: a WAITING trial that the next ``ask()`` pops first.

        An enqueued trial is one of ``budget.trials``: a sweep that has used them all takes
        none (``ConfigError`` naming the budget)."""
        limit, name = self.trials, self.study.study_name
        existing = self.study.get_trials(deepcopy=False)
        if limit is not None and len(existing) >= limit:
            raise ConfigError(
                f"budget.trials: sweep {name!r} already has {len(existing)} of its "
                f"{limit} trials; raise budget.trials in the sweep file to enqueue more"
            )
        self.study.enqueue_trial(dict(params), skip_if_exists=False)
        waiting = self.study.get_trials(deepcopy=False, states=(OptunaState.WAITING,))
        return max(t.number for t in waiting)

    def requeue(self, trial_number: int) -> None:
        """Back in Optuna's queue with its params: the next ``ask()`` pops it again. A trial
        that has ended meanwhile (a late requeue: its copy finished while its worker was
        frozen) stays as it ended."""
        self._set_unless_finished(self._trial_id(trial_number), OptunaState.WAITING)

    def _set_unless_finished(self, trial_id: int, state: OptunaState) -> None:
        try:
            self._study_storage.set_trial_state_values(trial_id, state)
        except optuna.exceptions.UpdateFinishedTrialError:
            logger.info("trial id %d has already ended; left as it is (not %s)", trial_id, state)

    def _end(self, trial_number: int, end: TrialEnd) -> None:
        mapping = {
            TrialState.COMPLETE: OptunaState.COMPLETE,
            TrialState.PRUNED: OptunaState.PRUNED,
            TrialState.FAIL: OptunaState.FAIL,
        }
        trial_id = self._trial_id(trial_number)
        if self._study_storage.get_trial(trial_id).state == OptunaState.WAITING:
            # requeued meanwhile (its worker was taken for lost): only a FAIL still ends it
            if end.state is TrialState.FAIL:
                self._set_unless_finished(trial_id, OptunaState.FAIL)
            return
        self.study.tell(
            trial_number,
            end.values if end.state is TrialState.COMPLETE else None,
            state=mapping[end.state],
            skip_if_finished=True,
        )
