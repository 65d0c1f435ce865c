"""``scheduler.max_history``: what TPE and the GP read of a long sweep (the best half of the
cap, the most recent finished trials, every running one)."""

from __future__ import annotations

import random

import optuna
import pytest
from optuna.trial import TrialState

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config.scheduler_parsing import parse_scheduler_config
from hyperfleet.platform.config.schedulers import GPConfig, TPEConfig
from hyperfleet.platform.schedulers.optuna.history import (
    HistoryCappedSampler,
    IncrementalCap,
    capped,
)
from hyperfleet.platform.schedulers.optuna.samplers import build_sampler


def _study(n: int) -> optuna.Study:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for i in range(n):
        t = study.ask()
        t.suggest_float("x", 0.0, 1.0)
        study.tell(t, float((i * 37) % n))
    study.ask().suggest_float("x", 0.0, 1.0)  # one running
    return study


def test_capped_history_keeps_the_best_half_the_most_recent_and_every_running_trial() -> None:
    study = _study(40)
    trials = study.get_trials(deepcopy=False)
    kept = capped(trials, 10, list(study.directions))
    finished = [t for t in kept if t.state.is_finished()]
    assert len(finished) == 10 and kept[-1].state == optuna.trial.TrialState.RUNNING
    best = sorted(float(t.value) for t in trials if t.value is not None)[:5]  # type: ignore[arg-type]
    assert sorted(float(t.value) for t in finished)[:5] == best  # type: ignore[arg-type]
    assert {39, 38} <= {t.number for t in finished}  # the most recent
    assert capped(trials, 100, list(study.directions)) == trials  # below the cap: all


def test_tpe_reads_at_most_max_history_finished_trials() -> None:
    sampler = build_sampler(TPEConfig(type="tpe", seed=0, max_history=10))
    inner = sampler.inner  # the seeding wrapper's
    assert isinstance(inner, HistoryCappedSampler) and inner.cap == 10
    study = _study(40)
    seen: list[int] = []
    tpe_sample = inner.inner.sample_relative

    def spy(view, trial, space):  # type: ignore[no-untyped-def]
        states = (optuna.trial.TrialState.COMPLETE,)
        seen.append(len(view._get_trials(deepcopy=False, states=states)))
        return tpe_sample(view, trial, space)

    inner.inner.sample_relative = spy  # type: ignore[method-assign]
    study.sampler = sampler
    study.ask().suggest_float("x", 0.0, 1.0)
    assert seen == [10]


def test_max_history_defaults_and_bad_values() -> None:
    assert TPEConfig(type="tpe").max_history == 500 and GPConfig(type="gp").max_history == 200
    assert TPEConfig(type="tpe", max_history=None).max_history is None
    with pytest.raises(ConfigError, match="max_history"):
        parse_scheduler_config({"type": "tpe", "max_history": 1})


def test_the_gp_fits_at_most_max_history_finished_trials() -> None:
    sampler = build_sampler(GPConfig(type="gp", max_history=10, value_transform="standardize"))
    study = _study(40)
    complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    fitted = sampler.fit_trials(study, complete)  # type: ignore[attr-defined]
    assert len(fitted) == 10 and min(t.value for t in fitted) == 0.0  # type: ignore[type-var]


@pytest.mark.parametrize("direction", ["minimize", "maximize"])
@pytest.mark.parametrize("states", [None, (TrialState.COMPLETE, TrialState.PRUNED)])
def test_the_incremental_cap_gives_what_capped_gives_as_the_history_grows(
    direction: str, states: tuple[TrialState, ...] | None
) -> None:
    """Trials start, and end in any order (complete, pruned, failed, with ties in value), and
    the history is read after each change, of every state or of finished ones only (as TPE
    reads it): the incremental cap keeps exactly the trials :func:`capped` keeps."""
    rng = random.Random(7)
    study = optuna.create_study(direction=direction)
    cap = IncrementalCap(10, list(study.directions))
    running: list[optuna.trial.Trial] = []
    for _ in range(400):
        if running and (len(running) > 6 or rng.random() < 0.5):
            t = running.pop(rng.randrange(len(running)))
            end = rng.random()
            if end < 0.1:
                study.tell(t, state=TrialState.FAIL)
            elif end < 0.25:
                study.tell(t, state=TrialState.PRUNED)
            else:
                study.tell(t, float(rng.randrange(20)))  # ties
        else:
            t = study.ask()
            t.suggest_float("x", 0.0, 1.0)
            running.append(t)
        trials = study.get_trials(deepcopy=False, states=states)
        expected = capped(trials, 10, list(study.directions))
        assert [t.number for t in cap(trials)] == [t.number for t in expected]
