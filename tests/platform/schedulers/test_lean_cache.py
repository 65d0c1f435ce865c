"""The lean cache of a study's trials (``internals.LeanCachedStorage``): another worker's new
trials, state changes (ended, requeued) are seen; a running trial that did not change is not
read again in full."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from hyperfleet.platform.schedulers.optuna.internals import LeanCachedStorage


def test_a_lean_cache_sees_changes_and_rereads_only_them(tmp_path: Path) -> None:
    rdb = RDBStorage(f"sqlite:///{tmp_path / 'o.db'}")
    mine = optuna.create_study(storage=LeanCachedStorage(rdb), study_name="s")
    cache = LeanCachedStorage(rdb)
    other = optuna.load_study(storage=cache, study_name="s")
    running = [mine.ask() for _ in range(3)]
    for t in running:
        t.suggest_float("x", 0.0, 1.0)
    assert [t.state for t in other.get_trials()] == [TrialState.RUNNING] * 3
    read: list[Any] = []
    full = rdb._get_trials

    def spy(study_id: int, states: Any, included_trial_ids: set[int], **kw: Any) -> Any:
        out = full(study_id, states, included_trial_ids, **kw)
        read.append(sorted(t.number for t in out))
        return out

    rdb._get_trials = spy  # type: ignore[method-assign]
    assert other.get_trials()[0].params  # nothing changed: nothing read in full
    mine.tell(running[0], 1.0)
    rdb.set_trial_state_values(running[1]._trial_id, TrialState.WAITING)  # requeued
    states = [t.state for t in other.get_trials()]
    assert states == [TrialState.COMPLETE, TrialState.WAITING, TrialState.RUNNING]
    assert read == [[], [0, 1]]
    popped = other.ask()
    assert popped.number == 1 and popped.params == running[1].params


def test_a_read_of_unfinished_states_answers_as_optunas_cache(tmp_path: Path) -> None:
    """Reads of WAITING or RUNNING trials look at the unfinished trials held only, and
    answer what Optuna's cache answers: with finished trials, requeued ones and one just made
    by this process."""
    from optuna.storages._cached_storage import _CachedStorage

    rdb = RDBStorage(f"sqlite:///{tmp_path / 'o.db'}")
    cache = LeanCachedStorage(rdb)
    study = optuna.create_study(storage=cache, study_name="s")
    for i in range(6):
        t = study.ask()
        t.suggest_float("x", 0.0, 1.0)
        if i % 2 == 0:
            study.tell(t, float(i))
    study.ask()  # made here: RUNNING in this cache at once
    rdb.set_trial_state_values(study.trials[1]._trial_id, TrialState.WAITING)  # requeued
    sid = study._study_id
    for states in [(TrialState.WAITING,), (TrialState.RUNNING,), (TrialState.RUNNING,
                   TrialState.WAITING), (TrialState.COMPLETE,), None]:  # fmt: skip
        lean = [(t.number, t.state) for t in cache.get_all_trials(sid, False, states)]
        optunas = [
            (t.number, t.state) for t in _CachedStorage.get_all_trials(cache, sid, False, states)
        ]
        assert lean == optunas, states
    waiting = cache.get_all_trials(sid, states=(TrialState.WAITING,))
    running = cache.get_all_trials(sid, states=(TrialState.RUNNING,))
    assert [t.number for t in waiting] == [1] and [t.number for t in running] == [3, 5, 6]


def test_the_running_trials_numbers_are_read_without_the_history(tmp_path: Path) -> None:
    """A worker whose claims all took suggestions made ahead never read the history; its
    look for phantoms asks for the running trials' numbers, and reads no trial in full
    (through the cache it read every trial of the sweep, at every idle worker's look)."""
    from hyperfleet.platform.schedulers.optuna.internals import running_numbers

    rdb = RDBStorage(f"sqlite:///{tmp_path / 'o.db'}")
    mine = optuna.create_study(storage=LeanCachedStorage(rdb), study_name="s")
    for i in range(8):
        t = mine.ask()
        t.suggest_float("x", 0.0, 1.0)
        if i % 3:
            mine.tell(t, float(i))
    rdb.set_trial_state_values(mine.trials[3]._trial_id, TrialState.WAITING)  # requeued
    read: list[Any] = []
    full = rdb._get_trials

    def spy(*args: Any, **kw: Any) -> Any:
        out = full(*args, **kw)
        read.append(len(out))
        return out

    rdb._get_trials = spy  # type: ignore[method-assign]
    idle = optuna.load_study(storage=LeanCachedStorage(rdb), study_name="s")
    assert running_numbers(idle) == {0, 6}
    assert read == [], "no trial read in full"
    memory = optuna.create_study()
    memory.ask()
    assert running_numbers(memory) == {0}


def test_the_history_stays_in_order_when_trials_arrive_out_of_it(tmp_path: Path) -> None:
    """The history is answered from a list kept by number (Optuna's cache sorts every trial
    at each read). A trial this process makes can be numbered after others' it has not read
    yet; they arrive after it, and every read still answers what Optuna's does, in order.
    A list handed out is the caller's own."""
    from optuna.storages._cached_storage import _CachedStorage

    rdb = RDBStorage(f"sqlite:///{tmp_path / 'o.db'}")
    theirs = optuna.create_study(storage=LeanCachedStorage(rdb), study_name="s")
    cache = LeanCachedStorage(rdb)
    mine = optuna.load_study(storage=cache, study_name="s")
    sid = mine._study_id
    assert cache.get_all_trials(sid) == []
    for i in range(3):
        t = theirs.ask()
        t.suggest_float("x", 0.0, 1.0)
        theirs.tell(t, float(i))
    made = cache.create_new_trial(sid)  # number 3, before 0-2 were read here
    assert [t.number for t in cache._ordered[sid]] == [3]
    t = theirs.ask()
    theirs.tell(t, 9.0)  # 4, ended
    rdb.set_trial_state_values(made, TrialState.PRUNED)
    expected = [TrialState.COMPLETE] * 3 + [TrialState.PRUNED, TrialState.COMPLETE]
    assert [(t.number, t.state) for t in cache.get_all_trials(sid)] == [
        (n, s) for n, s in enumerate(expected)
    ]
    for states in [None, (TrialState.COMPLETE,), (TrialState.COMPLETE, TrialState.PRUNED),
                   (TrialState.PRUNED, TrialState.RUNNING)]:  # fmt: skip
        lean = [(t.number, t.state) for t in cache.get_all_trials(sid, False, states)]
        optunas = [
            (t.number, t.state) for t in _CachedStorage.get_all_trials(cache, sid, False, states)
        ]
        assert lean == optunas, states
    cache.get_all_trials(sid, deepcopy=False).clear()
    assert len(cache.get_all_trials(sid, deepcopy=False)) == 5
