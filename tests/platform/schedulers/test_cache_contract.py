"""The contract of a cache of a study's trials that Optuna's storage suite does not check
(``test_optuna_storage_suite.py`` runs that suite): a write to an unfinished trial the cache
already holds shows in the very next read of the history, whichever state filter it reads
with, and whichever worker wrote it.

Optuna's own cache (``_CachedStorage``) keeps this contract: it re-reads every unfinished
trial at each ``get_all_trials``. What relies on it: Optuna's ``SuccessiveHalvingPruner``
(``asha``, ``hyperband``) reads the ``completed_rung_*`` system attrs of the other workers'
running trials from the history; a sampler reads a running trial's params and system attrs
(``gp``, ``skopt``: its point) from it.

Each case runs on the platform's storage (``internals.lean_storage`` over
``Storage.optuna``'s ``RDBStorage``, as ``open_study`` builds it) and, as the control that
holds the test to Optuna's behaviour, on Optuna's ``_CachedStorage`` over the same backend;
every read is compared with a fresh ``_CachedStorage``'s read of the same database.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.storages import BaseStorage, RDBStorage
from optuna.storages._cached_storage import _CachedStorage
from optuna.trial import FrozenTrial, TrialState

from hyperfleet.platform.schedulers.optuna import internals
from hyperfleet.platform.storage.engine import release_optuna, shared_optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)

X = FloatDistribution(0.0, 1.0)
Y = CategoricalDistribution(["a", "b", "c"])
RUNNING, COMPLETE, WAITING = TrialState.RUNNING, TrialState.COMPLETE, TrialState.WAITING


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'optuna.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def rdb(url: str) -> Iterator[RDBStorage]:
    """The platform's RDBStorage on ``url`` (``Storage.optuna``)."""
    storage = shared_optuna(url, readonly=False, create=True)
    try:
        yield storage
    finally:
        storage.remove_session()
        release_optuna(storage)


@pytest.fixture
def other_rdb(url: str, rdb: RDBStorage) -> Iterator[RDBStorage]:
    """Another worker's RDBStorage on the same database (an engine of its own)."""
    storage = RDBStorage(url, skip_compatibility_check=True, skip_table_creation=True)
    try:
        yield storage
    finally:
        storage.engine.dispose()


# The cache under test: the platform's, and Optuna's as the control.
CACHES: dict[str, Callable[[RDBStorage], BaseStorage]] = {
    "lean": internals.lean_storage,
    "optuna-cache": _CachedStorage,
}


@pytest.fixture(params=sorted(CACHES))
def cache(request: pytest.FixtureRequest, rdb: RDBStorage) -> BaseStorage:
    storage = CACHES[request.param](rdb)
    if request.param == "lean":
        assert isinstance(storage, internals.LeanCachedStorage)
    return storage


def view(trials: list[FrozenTrial]) -> list[tuple[Any, ...]]:
    """What a read shows of each trial: its number, state, params and what is written
    while it runs."""
    return [
        (
            t.number,
            t.state.name,
            t.params,
            t.intermediate_values,
            t.user_attrs,
            t.system_attrs,
        )
        for t in trials
    ]


@dataclass(frozen=True)
class Write:
    """A write to a running trial and what the trial must then show."""

    do: Callable[[BaseStorage, optuna.Study, int], None]
    shown: Callable[[FrozenTrial], Any]
    expected: Any


WRITES: dict[str, Write] = {
    "set_trial_param": Write(
        lambda s, study, tid: s.set_trial_param(tid, "x", 0.5, X),
        lambda t: t.params,
        {"x": 0.5},
    ),
    "internals.write_params": Write(
        lambda s, study, tid: internals.write_params(s, tid, [("x", 0.5, X), ("y", 2.0, Y)]),
        lambda t: t.params,
        {"x": 0.5, "y": "c"},
    ),
    "set_trial_intermediate_value": Write(
        lambda s, study, tid: s.set_trial_intermediate_value(tid, 3, 0.7),
        lambda t: t.intermediate_values,
        {3: 0.7},
    ),
    "internals.set_intermediate_value": Write(
        lambda s, study, tid: internals.set_intermediate_value(study, tid, 3, 0.7),
        lambda t: t.intermediate_values,
        {3: 0.7},
    ),
    "set_trial_user_attr": Write(
        lambda s, study, tid: s.set_trial_user_attr(tid, "u", 1),
        lambda t: t.user_attrs,
        {"u": 1},
    ),
    "set_trial_system_attr": Write(
        lambda s, study, tid: s.set_trial_system_attr(tid, "completed_rung_0", 0.7),
        lambda t: {k: v for k, v in t.system_attrs.items() if k.startswith("completed_rung")},
        {"completed_rung_0": 0.7},
    ),
}

# The state filters a read of the history is made with; the trial written is in each.
FILTERS: dict[str, tuple[tuple[TrialState, ...] | None, TrialState]] = {
    "all": (None, RUNNING),
    "running": ((RUNNING,), RUNNING),
    "running+complete": ((RUNNING, COMPLETE), RUNNING),
    "waiting": ((WAITING,), WAITING),
}


def new_study(storage: BaseStorage) -> tuple[optuna.Study, int]:
    """A study on ``storage`` with one finished trial (so a filter has more than one state
    to tell apart)."""
    study = optuna.create_study(storage=storage, study_name="s")
    study.add_trial(optuna.trial.create_trial(params={"x": 0.1}, distributions={"x": X}, value=1.0))
    return study, internals.study_id(study)


def check_read(
    storage: BaseStorage,
    rdb: RDBStorage,
    study_id: int,
    states: tuple[TrialState, ...] | None,
    number: int,
    shown: Callable[[FrozenTrial], Any],
    expected: Any,
    what: str,
) -> None:
    """``storage``'s next read of the history with ``states`` shows ``expected`` on trial
    ``number`` and answers what a fresh Optuna cache of the database answers."""
    read = storage.get_all_trials(study_id, deepcopy=False, states=states)
    fresh = _CachedStorage(rdb).get_all_trials(study_id, deepcopy=False, states=states)
    trial = next((t for t in read if t.number == number), None)
    assert trial is not None, f"{what}: trial {number} is missing from the read"
    assert shown(trial) == expected, (
        f"{what}, then get_all_trials(states={states}): trial {number} shows "
        f"{shown(trial)!r}, not {expected!r}"
    )
    assert view(read) == view(fresh), f"{what}: the read differs from Optuna's cache's"


@pytest.mark.parametrize("filter_name", list(FILTERS))
@pytest.mark.parametrize("write_name", list(WRITES))
def test_a_write_to_a_cached_unfinished_trial_shows_in_the_next_read(
    cache: BaseStorage, rdb: RDBStorage, write_name: str, filter_name: str
) -> None:
    """One process, one storage object: a trial it holds unfinished, written through it."""
    states, state = FILTERS[filter_name]
    study, sid = new_study(cache)
    template = None if state == RUNNING else optuna.trial.create_trial(state=state)
    tid = cache.create_new_trial(sid, template_trial=template)
    number = cache.get_trial(tid).number
    for held in (None, states):  # the cache holds the trial unfinished, as this filter reads it
        assert number in [t.number for t in cache.get_all_trials(sid, states=held)]
    write = WRITES[write_name]
    write.do(cache, study, tid)
    what = f"{write_name} on a {state.name} trial held in the cache"
    check_read(cache, rdb, sid, states, number, write.shown, write.expected, what)


# What another worker writes to its running trial while this one holds it: a report and
# the pruner's rung, as SuccessiveHalvingPruner then reads them from the history.
OTHER_WRITES: dict[str, Write] = {
    name: WRITES[name]
    for name in (
        "set_trial_intermediate_value",
        "internals.set_intermediate_value",
        "set_trial_system_attr",
    )
}


@pytest.mark.parametrize("filter_name", ["all", "running", "running+complete"])
@pytest.mark.parametrize("write_name", list(OTHER_WRITES))
def test_another_workers_write_to_a_cached_running_trial_shows_in_the_next_read(
    cache: BaseStorage,
    rdb: RDBStorage,
    other_rdb: RDBStorage,
    write_name: str,
    filter_name: str,
) -> None:
    """Two workers, each a cache of its own on the same database: this one holds the other's
    running trial; the other writes to it; this one's next read shows the write."""
    states, _ = FILTERS[filter_name]
    _, sid = new_study(cache)
    theirs = internals.lean_storage(other_rdb)
    their_study = optuna.load_study(study_name="s", storage=theirs)
    tid = theirs.create_new_trial(sid)
    number = theirs.get_trial(tid).number
    for held in (None, states):
        assert number in [t.number for t in cache.get_all_trials(sid, states=held)]
    write = OTHER_WRITES[write_name]
    write.do(theirs, their_study, tid)
    what = f"another worker's {write_name} on its RUNNING trial held in this cache"
    check_read(cache, rdb, sid, states, number, write.shown, write.expected, what)


def test_asha_compares_a_report_with_the_rung_another_worker_reached(
    cache: BaseStorage, other_rdb: RDBStorage
) -> None:
    """Successive halving as a sweep's workers run it (``OptunaScheduler.report`` and
    ``decide``): both trials run at once, each worker's cache holds the other's trial; the
    other worker's trial reaches rung 0 first with the better value; this worker's report at
    the rung, worse, is then pruned (top half of two). A cache that did not show the other's
    ``completed_rung_0`` would compare the report with itself alone and promote it."""
    pruner = optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=2)
    mine = optuna.create_study(storage=cache, study_name="s", pruner=pruner)
    theirs = optuna.load_study(
        study_name="s", storage=internals.lean_storage(other_rdb), pruner=pruner
    )
    their_trial = theirs.ask()
    my_trial = mine.ask()
    assert len(mine.get_trials(deepcopy=False)) == 2  # both held running, here and there
    assert len(theirs.get_trials(deepcopy=False)) == 2

    def report(study: optuna.Study, trial: optuna.Trial, value: float) -> bool:
        tid = internals.trial_id(trial)
        internals.set_intermediate_value(study, tid, 1, value)
        storage = internals.study_storage(study)
        return study.pruner.prune(study, storage.get_trial(tid))

    assert not report(theirs, their_trial, 0.1)  # the first at the rung is promoted
    pruned = report(mine, my_trial, 0.9)
    shown = [t.system_attrs.get("completed_rung_0") for t in mine.get_trials(deepcopy=False)]
    assert pruned, f"promoted past a better rung-0 value; this worker's history shows {shown}"
    assert shown == [0.1, 0.9]
