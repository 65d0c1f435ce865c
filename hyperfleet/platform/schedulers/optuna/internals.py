"""Every use of Optuna's private names, behind small named functions: the one adapter module.

Written against Optuna 5.1 (``pyproject.toml`` pins the range the tests ran on). The rest of
``hyperfleet`` calls these and never touches a private name of Optuna's itself
(``tests/test_optuna_internals.py`` holds it to that), so an Optuna upgrade that moves one of
them shows here, in one file, and in the tests of the samplers that use it
(``tests/platform/schedulers``). What is private and why the platform needs it:

* ``study._storage``, ``trial._trial_id``: a study's storage and a trial's storage id, to read
  and write one trial by id without building a ``Trial`` (whose constructor runs the sampler's
  relative search space over the whole history) — ``study_storage``, ``trial_id``.
* ``study._get_trials(use_cache=False)``: the trials fresh from storage, RUNNING trials of
  other workers included, not the per-``ask`` cache — ``fresh_trials``.
* ``optuna.storages._rdb.models`` and the cached storage's ``_backend``: a report's
  intermediate value written as plain statements on Optuna's own tables —
  ``set_intermediate_value``.
* ``optuna.samplers._lazy_random_state.LazyRandomState`` and the attributes samplers keep them
  in (``_rng``, ``_cma_rng``, nested samplers): reseeded per trial — ``random_states``.
* ``optuna._gp``, ``GPSampler._sample_relative_impl`` / ``_get_acqf_and_best_params`` and
  ``optuna.study._constrained_optimization``: the GP sampler's fitting and acquisition hooks —
  ``GPSamplerHooks``, ``believer_gp``, ``log_ei``, ``ucb``, ``is_constrained``.
* ``BaseSampler._raise_error_if_multi_objective`` — ``reject_multi_objective``.
* ``Study._get_trials``, what samplers read the history through: a study whose history a
  sampler sees capped — ``HistoryView``.
* ``optuna.storages._cached_storage`` (``_CachedStorage``, ``_StudyInfo``, its
  ``_read_trials_from_remote_storage``) and ``RDBStorage._get_trials``: a cache that re-reads
  an unfinished trial only when its state changed — ``LeanCachedStorage``.
* ``study._study_id``, the cached storage's ``_lock``, ``_backend`` and
  ``_trial_id_to_study_id_and_number``, ``_studies[...].param_distribution``, and
  ``optuna.storages._rdb.models``: a new trial's parameters written in one transaction —
  ``study_id``, ``write_params`` (:mod:`.batched`); the trials counted by state in SQL —
  ``state_counts``.
"""

from __future__ import annotations

import bisect
import copy
from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna
import sqlalchemy as sa
from optuna.samplers._lazy_random_state import LazyRandomState
from optuna.storages._cached_storage import _CachedStorage, _StudyInfo
from optuna.study._constrained_optimization import _is_constrained_optimization
from optuna.trial import TrialState

from hyperfleet.platform.schedulers.optuna import spread

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution
    from optuna.storages import BaseStorage
    from optuna.study import Study
    from optuna.trial import FrozenTrial

__all__ = [
    "GPFit",
    "GPSamplerHooks",
    "LazyRandomState",
    "believer_gp",
    "fresh_trials",
    "is_constrained",
    "log_ei",
    "random_states",
    "reject_multi_objective",
    "set_intermediate_value",
    "study_storage",
    "trial_id",
    "ucb",
]


def study_storage(study: Study) -> BaseStorage:
    """The storage ``study`` reads and writes (Optuna's cached wrapper of an RDB storage)."""
    return study._storage


def trial_id(trial: FrozenTrial | optuna.Trial) -> int:
    """``trial``'s id in its storage (unique across studies, unlike its number)."""
    return trial._trial_id


def fresh_trials(study: Study) -> list[FrozenTrial]:
    """``study``'s trials read from storage now (not the cache ``ask`` fills), uncopied."""
    return study._get_trials(deepcopy=False, use_cache=False)


def reject_multi_objective(sampler: optuna.samplers.BaseSampler, study: Study) -> None:
    """Optuna's ``ValueError`` for a single-objective sampler given a multi-objective study."""
    sampler._raise_error_if_multi_objective(study)


def is_constrained(trials: list[FrozenTrial]) -> bool:
    """Whether ``trials`` carry constraint values (a constrained optimisation)."""
    return _is_constrained_optimization(trials)


def set_intermediate_value(study: Study, trial: int, step: int, value: float) -> None:
    """The intermediate ``value`` of trial id ``trial`` at ``step``; on an RDB storage as three
    plain statements in one transaction (see ``_write_intermediate``)."""
    storage = study._storage
    backend = getattr(storage, "_backend", storage)  # Optuna wraps RDB storage in a cache
    if isinstance(backend, optuna.storages.RDBStorage):
        _write_intermediate(backend, trial, step, value)
        if isinstance(storage, LeanCachedStorage):
            storage._touch(trial)
    else:
        storage.set_trial_intermediate_value(trial, step, value)


def _write_intermediate(storage: Any, trial: int, step: int, value: float) -> None:
    """``RDBStorage.set_trial_intermediate_value`` as three plain statements in one
    transaction (the trial's state, then update or insert), on Optuna's own table
    definitions; the same rows and the same error for a finished trial, in a fraction of the
    ORM's time (a report's hot path)."""
    from optuna.storages._rdb import models

    model = models.TrialIntermediateValueModel
    stored, kind = model.intermediate_value_to_stored_repr(value)
    table, trials = model.__table__, models.TrialModel.__table__
    row = {"intermediate_value": stored, "intermediate_value_type": kind}
    with storage.engine.begin() as conn:
        state = conn.execute(
            sa.select(trials.c.state).where(trials.c.trial_id == trial)
        ).scalar_one()
        storage.check_trial_is_updatable(trial, state)
        where = (table.c.trial_id == trial) & (table.c.step == step)
        if not conn.execute(sa.update(table).where(where).values(**row)).rowcount:
            conn.execute(sa.insert(table).values(trial_id=trial, step=step, **row))


def random_states(root: object) -> list[LazyRandomState]:
    """Every ``LazyRandomState`` reachable from ``root`` through the attributes of optuna and
    hyperfleet objects, in a deterministic order (attributes by name)."""
    found: list[LazyRandomState] = []
    seen: set[int] = set()
    stack: list[object] = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, LazyRandomState):
            found.append(obj)
            continue
        module = type(obj).__module__
        if not module.startswith(("optuna.", "hyperfleet.")) or not hasattr(obj, "__dict__"):
            continue
        attrs = vars(obj)
        stack.extend(attrs[k] for k in sorted(attrs, reverse=True))
    return found


@dataclass(frozen=True)
class GPFit:
    """What ``GPSampler`` has when it picks its acquisition: the finished trials, the GPs
    fitted to them (one per objective), Optuna's normalised search space, the finished points
    ``x`` and running points ``x_running`` (normalised; None: nothing runs) and the
    standardised values ``y`` (maximised, one column per objective)."""

    completed: list[FrozenTrial]
    gprs: list[Any]
    space: Any
    x: np.ndarray
    x_running: np.ndarray | None
    y: np.ndarray


class GPSamplerHooks(optuna.samplers.GPSampler):
    """``GPSampler`` with its two private hooks under public names, for a subclass to override.

    ``fit_trials`` — the finished trials the GP is fitted to (default: as given);
    ``acquisition`` — an ``(acquisition, warm start)`` pair to use instead of Optuna's, or None
    for Optuna's own (default)."""

    def fit_trials(self, study: Study, completed: list[FrozenTrial]) -> list[FrozenTrial]:
        return completed

    def acquisition(self, fit: GPFit) -> tuple[Any, np.ndarray | None] | None:
        return None

    def _sample_relative_impl(
        self,
        study: Study,
        completed_trials: list[FrozenTrial],
        running_trials: list[FrozenTrial],
        search_space: dict[str, BaseDistribution],
    ) -> dict[str, Any]:
        fitted = self.fit_trials(study, completed_trials)
        return super()._sample_relative_impl(study, fitted, running_trials, search_space)

    def _get_acqf_and_best_params(
        self,
        completed_trials: list[FrozenTrial],
        gprs_list: list[Any],
        internal_search_space: Any,
        normalized_params: np.ndarray,
        normalized_params_of_running_trials: np.ndarray | None,
        standardized_score_vals: np.ndarray,
    ) -> tuple[Any, np.ndarray | None]:
        args = (
            completed_trials,
            gprs_list,
            internal_search_space,
            normalized_params,
            normalized_params_of_running_trials,
            standardized_score_vals,
        )
        chosen = self.acquisition(GPFit(*args))
        return chosen if chosen is not None else super()._get_acqf_and_best_params(*args)

    def settle(self, acqf: Any, x: np.ndarray, rng: np.random.RandomState) -> np.ndarray:
        """The normalized point to suggest, given the acquisition and ``x``, the point found
        to maximise it (default: ``x``); ``rng``: the sampler's random state."""
        return x

    def _optimize_acqf(self, acqf: Any, best_params: np.ndarray | None) -> np.ndarray:
        return self.settle(acqf, super()._optimize_acqf(acqf, best_params), self._rng.rng)


def gp_categorical(acqf: Any) -> np.ndarray:
    """The mask of the columns of ``acqf``'s normalized points that hold a choice's index."""
    return np.asarray(acqf.search_space.is_categorical, dtype=bool)


def gp_candidates(
    acqf: Any, x: np.ndarray, rng: np.random.RandomState, n: int = 2048
) -> tuple[np.ndarray, np.ndarray]:
    """Candidates for ``spread.best_apart`` on Optuna's GP path and their acquisition values:
    ``n`` quasi-random normalized points of ``acqf``'s search space and points scattered
    around ``x`` in its continuous columns."""
    space = acqf.search_space
    continuous = np.zeros(space.dim, dtype=bool)
    continuous[space.continuous_indices] = True
    points = np.vstack([space.sample_normalized_params(n, rng), spread.around(x, continuous, rng)])
    return points, np.asarray(acqf.eval_acqf_no_grad(points), dtype=float)


def believer_gp(
    fitted: Any, x: np.ndarray, y: np.ndarray, x_running: np.ndarray
) -> tuple[Any, np.ndarray]:
    """``fitted`` (an ``optuna._gp`` regressor fitted to ``x, y``) conditioned on
    ``x_running`` with its own posterior mean there, kernel hyperparameters and noise kept;
    and those believed values."""
    from optuna._gp import gp

    # Tensors made from the fitted model's own (torch is Optuna's import here, not ours).
    running = fitted._X_train.new_tensor(x_running)
    believed = fitted.posterior(running)[0].numpy()  # no gradient: the kernel is detached
    model = gp.GPRegressor(
        is_categorical=fitted._is_categorical,
        X_train=fitted._X_train.new_tensor(np.vstack([x, x_running])),
        y_train=fitted._X_train.new_tensor(np.concatenate([y, believed])),
        inverse_squared_lengthscales=fitted.inverse_squared_lengthscales,
        kernel_scale=fitted.kernel_scale,
        noise_var=fitted.noise_var,
    )
    model._cache_matrix()
    return model, believed


def log_ei(model: Any, space: Any, threshold: float) -> Any:
    """Optuna's analytic log expected improvement over ``threshold`` on GP ``model``."""
    from optuna._gp import acqf

    return acqf.LogEI(gpr=model, search_space=space, threshold=threshold)


def ucb(model: Any, space: Any, beta: float) -> Any:
    """Optuna's upper confidence bound ``mean + sqrt(beta) * std`` on GP ``model``."""
    from optuna._gp import acqf

    return acqf.UCB(gpr=model, search_space=space, beta=beta)


class HistoryView:
    """``study`` as a sampler sees it with its history passed through ``keep`` (a function of
    the trials read, in order of number, and the states asked for, to those the sampler is
    given): what
    ``Study._get_trials`` and ``Study.get_trials`` return; everything else is the study's."""

    def __init__(
        self, study: Study, keep: Callable[[list[FrozenTrial], Any], list[FrozenTrial]]
    ) -> None:
        self._study = study
        self._keep = keep

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _get_trials(
        self,
        deepcopy: bool = True,
        states: Container[optuna.trial.TrialState] | None = None,
        use_cache: bool = False,
    ) -> list[FrozenTrial]:
        trials = self._study._get_trials(deepcopy=deepcopy, states=states, use_cache=use_cache)
        return self._keep(trials, states)

    def get_trials(
        self, deepcopy: bool = True, states: Container[optuna.trial.TrialState] | None = None
    ) -> list[FrozenTrial]:
        return self._keep(self._study.get_trials(deepcopy=deepcopy, states=states), states)


def _number(trial: FrozenTrial) -> int:
    return trial.number


class LeanCachedStorage(_CachedStorage):
    """Optuna's cache of a study's trials (what ``optuna.load_study`` wraps an RDB storage
    in) that re-reads a trial it holds unfinished only when it changed.

    Optuna's re-reads every unfinished trial in full (params, attributes, intermediate
    values) at every read of the history, and a suggestion reads it two or three times: with
    a fleet's hundreds of trials running, that is most of a claim's time, under the sweep's
    claim lock. This one asks the database, in one light query, for each unfinished trial it
    holds: its state and how many params, intermediate values, user and system attributes it
    has (index look-ups, no values). It reads in full only the trials whose answer differs
    from the copy held, the trials it has not seen, and the trials this process wrote to
    since it read them (:meth:`_touch`: a write that replaces a value in place changes no
    count). So every write to a RUNNING or WAITING trial is in the next read of the history,
    as in Optuna's cache: the params a suggestion writes after its sampler read the trial
    without them (what constant liars and the GP's pending points need), another trial's
    intermediate values and ASHA's ``completed_rung_*`` attributes (what a pruner compares
    against). One gap is left, and said: another process's write that replaces a value in
    place (an attribute set again, a step reported again) is seen at the trial's next change
    of count or state; the platform writes neither to a running trial's Optuna record.

    It also keeps each study's trials in a list ordered by number, updated as trials are
    read: a read of the history answers from it, where Optuna's sorts every trial of the
    study at each call (a read of 10,000 finished trials, as TPE makes two a suggestion under
    the claim lock: 1.64 ms against 2.26 ms, ``benchmarks/bench_suggest_growth.py``)."""

    def __init__(self, backend: optuna.storages.RDBStorage) -> None:
        super().__init__(backend)
        self._seen: dict[int, int] = {}  # study id -> the highest trial id read
        self._ordered: dict[int, list[FrozenTrial]] = {}  # study id -> its trials, by number
        self._written: set[int] = set()  # trials this process wrote to since it read them

    def _touch(self, trial_id: int) -> None:
        """``trial_id`` was written through this process: read it in full at the next read."""
        with self._lock:
            self._written.add(trial_id)

    def set_trial_param(
        self, trial_id: int, name: str, internal: float, distribution: BaseDistribution
    ) -> None:
        super().set_trial_param(trial_id, name, internal, distribution)
        self._touch(trial_id)

    def set_trial_intermediate_value(self, trial_id: int, step: int, value: float) -> None:
        super().set_trial_intermediate_value(trial_id, step, value)
        self._touch(trial_id)

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        super().set_trial_user_attr(trial_id, key, value)
        self._touch(trial_id)

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        super().set_trial_system_attr(trial_id, key, value)
        self._touch(trial_id)

    def _add_trials_to_cache(self, study_id: int, trials: list[FrozenTrial]) -> None:
        super()._add_trials_to_cache(study_id, trials)
        ordered = self._ordered.setdefault(study_id, [])
        for trial in trials:  # by id: a study's numbers rise with its ids, so mostly appends
            n = trial.number
            if not ordered or ordered[-1].number < n:
                ordered.append(trial)
                continue
            i = bisect.bisect_left(ordered, n, key=_number)
            if i < len(ordered) and ordered[i].number == n:
                ordered[i] = trial
            else:
                ordered.insert(i, trial)

    def delete_study(self, study_id: int) -> None:
        with self._lock:
            self._ordered.pop(study_id, None)
            self._seen.pop(study_id, None)
        super().delete_study(study_id)

    def _read_trials_from_remote_storage(self, study_id: int) -> None:
        with self._lock:
            study = self._studies.setdefault(study_id, _StudyInfo())
            seen = self._seen.get(study_id, -1)
            changed = self._changed(study, seen)
            trials = self._backend._get_trials(
                study_id, states=None, included_trial_ids=changed, trial_id_greater_than=seen
            )
            if not trials:
                return
            self._add_trials_to_cache(study_id, trials)
            for trial in trials:
                tid = trial._trial_id
                self._written.discard(tid)
                self._seen[study_id] = max(self._seen.get(study_id, -1), tid)
                if trial.state.is_finished():
                    study.unfinished_trial_ids.discard(tid)
                    study.last_finished_trial_id = max(study.last_finished_trial_id, tid)
                else:
                    study.unfinished_trial_ids.add(tid)

    def get_all_trials(
        self,
        study_id: int,
        deepcopy: bool = True,
        states: Container[TrialState] | None = None,
    ) -> list[FrozenTrial]:
        """As Optuna's, but a read of unfinished states only (the WAITING trial a suggestion
        pops, the RUNNING ones) looks at the unfinished trials held, not the whole history
        (Optuna's filters and sorts every trial of the study at each call); any other read
        answers from the trials kept in order."""
        self._read_trials_from_remote_storage(study_id)
        if states is None or any(s.is_finished() and s in states for s in TrialState):
            with self._lock:
                ordered = self._ordered.get(study_id, [])
                if states is None:
                    trials = list(ordered)
                else:
                    trials = [t for t in ordered if t.state in states]
                return copy.deepcopy(trials) if deepcopy else trials
        with self._lock:
            study = self._studies[study_id]
            ids = study.unfinished_trial_ids
            numbers = sorted(self._trial_id_to_study_id_and_number[t][1] for t in ids)
            trials = [study.trials[n] for n in numbers if study.trials[n].state in states]
            return copy.deepcopy(trials) if deepcopy else trials

    def _changed(self, study: _StudyInfo, seen: int) -> set[int]:
        """The unfinished trials held (ids up to ``seen``) that changed since they were read:
        written through this process, or whose state or number of params, intermediate
        values, user or system attributes in the database is not the copy's."""
        from optuna.storages._rdb import models

        ids = sorted(i for i in study.unfinished_trial_ids if i <= seen)
        if not ids:
            return set()
        changed = {i for i in ids if i in self._written}
        asked = [i for i in ids if i not in changed]
        if not asked:
            return changed
        trials = models.TrialModel.__table__
        counted = [
            sa.select(sa.func.count())
            .where(table.c.trial_id == trials.c.trial_id)
            .scalar_subquery()
            for table in _child_tables()
        ]
        with self._backend.engine.connect() as conn:
            rows = conn.execute(
                sa.select(trials.c.trial_id, trials.c.state, *counted).where(
                    trials.c.trial_id.in_(asked)
                )
            ).all()
        for tid, state, *counts in rows:
            _, number = self._trial_id_to_study_id_and_number[tid]
            held = study.trials[number]
            if held.state != state or tuple(counts) != _counts(held):
                changed.add(int(tid))
        return changed


def _child_tables() -> tuple[sa.Table, ...]:
    """Optuna's tables of a trial's params, intermediate values, user and system attributes,
    in the order of :func:`_counts`."""
    from optuna.storages._rdb import models

    return (
        models.TrialParamModel.__table__,
        models.TrialIntermediateValueModel.__table__,
        models.TrialUserAttributeModel.__table__,
        models.TrialSystemAttributeModel.__table__,
    )


def _counts(trial: FrozenTrial) -> tuple[int, int, int, int]:
    """How many rows ``trial`` has in each of :func:`_child_tables`, as held."""
    return (
        len(trial.params),
        len(trial.intermediate_values),
        len(trial.user_attrs),
        len(trial.system_attrs),
    )


def lean_storage(storage: Any) -> Any:
    """``storage`` (given to ``optuna.load_study``/``create_study``) in a
    :class:`LeanCachedStorage` when it is an RDB storage; else as it is."""
    if isinstance(storage, optuna.storages.RDBStorage):
        return LeanCachedStorage(storage)
    return storage


# -- a suggestion's parameters in one transaction (:mod:`.batched`) ---------------------------

Param = tuple[str, float, "optuna.distributions.BaseDistribution"]


def study_id(study: Study) -> int:
    """The storage id of ``study``."""
    return int(study._study_id)


def _rdb(study: Study) -> optuna.storages.RDBStorage | None:
    """The RDB storage under ``study``'s cache, or None (an in-memory study)."""
    storage = study._storage
    backend = getattr(storage, "_backend", storage)
    return backend if isinstance(backend, optuna.storages.RDBStorage) else None


def state_counts(study: Study) -> dict[optuna.trial.TrialState, int]:
    """How many trials ``study`` has in each state: on an RDB storage one ``GROUP BY``
    (a claim needs no more of the history), else counted from the trials."""
    backend = _rdb(study)
    if backend is None:
        counts: dict[optuna.trial.TrialState, int] = {}
        for t in study.get_trials(deepcopy=False):
            counts[t.state] = counts.get(t.state, 0) + 1
        return counts
    from optuna.storages._rdb import models

    trials = models.TrialModel.__table__
    with backend.engine.connect() as conn:
        rows = conn.execute(
            sa.select(trials.c.state, sa.func.count())
            .where(trials.c.study_id == study._study_id)
            .group_by(trials.c.state)
        ).all()
    return {optuna.trial.TrialState(state): int(n) for state, n in rows}


def running_numbers(study: Study) -> set[int]:
    """The numbers of ``study``'s RUNNING trials: on an RDB storage one query of the numbers
    alone, else read from the trials. Through Optuna's cache, a worker whose scheduler never
    read the history (every claim took a suggestion made ahead) read all of it here, every
    trial with its params and attributes: a fleet's idle workers looking for phantoms at a
    sweep's end (1,000 simulated workers: most of their CPU, their heartbeats late)."""
    backend = _rdb(study)
    if backend is None:
        running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
        return {t.number for t in running}
    from optuna.storages._rdb import models

    trials = models.TrialModel.__table__
    with backend.engine.connect() as conn:
        rows = conn.execute(
            sa.select(trials.c.number).where(
                trials.c.study_id == study._study_id,
                trials.c.state == optuna.trial.TrialState.RUNNING,
            )
        ).all()
    return {int(n) for (n,) in rows}


def write_params(storage: Any, trial_id: int, params: list[Param]) -> None:
    """Write ``params`` (name, internal value, distribution) of trial ``trial_id``: on
    Optuna's cache over an RDB storage in one transaction (the trial's state checked, the
    distributions checked against the study's, one multi-row insert), else one
    ``set_trial_param`` each (``batched``)."""
    if not params:
        return
    if not isinstance(storage, _CachedStorage) or not isinstance(
        storage._backend, optuna.storages.RDBStorage
    ):
        for name, internal, distribution in params:
            storage.set_trial_param(trial_id, name, internal, distribution)
        return
    with storage._lock:
        study_id, _ = storage._trial_id_to_study_id_and_number[trial_id]
        known = storage._studies[study_id].param_distribution
        _insert(storage._backend, study_id, trial_id, params, dict(known))
        for name, _, distribution in params:
            known.setdefault(name, distribution)
    if isinstance(storage, LeanCachedStorage):
        storage._touch(trial_id)


def _insert(
    backend: Any, study_id: int, trial_id: int, params: list[Param],
    known: dict[str, BaseDistribution],
) -> None:  # fmt: skip
    from optuna.storages._rdb import models

    trials, table = models.TrialModel.__table__, models.TrialParamModel.__table__
    with backend.engine.begin() as conn:
        state = conn.execute(
            sa.select(trials.c.state).where(trials.c.trial_id == trial_id)
        ).scalar_one()
        backend.check_trial_is_updatable(trial_id, state)
        unknown = [name for name, _, _ in params if name not in known]
        if unknown:  # the study's first trial with them, or a cache that has not seen them
            rows = conn.execute(
                sa.select(table.c.param_name, sa.func.min(table.c.distribution_json))
                .join(trials, trials.c.trial_id == table.c.trial_id)
                .where(trials.c.study_id == study_id, table.c.param_name.in_(unknown))
                .group_by(table.c.param_name)
            ).all()
            known.update((n, optuna.distributions.json_to_distribution(t)) for n, t in rows)
        for name, _, distribution in params:
            if name in known:
                optuna.distributions.check_distribution_compatibility(known[name], distribution)
        conn.execute(
            sa.insert(table),
            [
                {"trial_id": trial_id, "param_name": name, "param_value": internal,
                 "distribution_json": optuna.distributions.distribution_to_json(distribution)}
                for name, internal, distribution in params
            ],
        )  # fmt: skip
