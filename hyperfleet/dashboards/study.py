"""A sweep as an in-memory Optuna study, so that ``optuna.visualization`` and
``optuna.importance`` draw and rank it.

Optuna's plots (optimisation history, parallel coordinates, slice, contour, Pareto front) and
its importance evaluators take a ``Study``. Rather than loading the sweep's RDB study — which
a PBT sweep does not have, and whose loading joins five tables per trial — the dashboard
rebuilds one in memory from the platform's trial table: the rows ``sweep status`` reads, so
the charts, the trials table and the CLI agree on every value, every best trial and every
Pareto front. Building it from 1,000 trials takes about a quarter of a second.

The study is built once per finished trial and then only read, so its trials are
:class:`SharedTrial`: Optuna's in-memory storage deep-copies a trial on the way in and, for
``study.trials``, every trial on every way out (one importance plot reads them four times:
seconds of copying at 1,000 trials); a shared trial's copy is the trial itself.

Distributions come from the sweep's search space; they are widened to cover every stored
value (a point enqueued by hand may lie outside the space, and Optuna refuses a trial whose
parameter its distribution does not contain). A PBT member is entered with the
hyperparameters it ended with.
"""

from __future__ import annotations

import copy
import datetime as dt
import math
import warnings
from typing import Any, cast

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import FrozenTrial, TrialState, create_trial

from hyperfleet.dashboards.queries import SweepData
from hyperfleet.platform.storage.results import TrialSummary
from hyperfleet.spec.states import TrialState as Stored

_STATES = {
    Stored.COMPLETE: TrialState.COMPLETE,
    Stored.PRUNED: TrialState.PRUNED,
    Stored.FAIL: TrialState.FAIL,
    Stored.RUNNING: TrialState.RUNNING,
    Stored.WAITING: TrialState.WAITING,
    Stored.PAUSED: TrialState.WAITING,
}

optuna.logging.set_verbosity(optuna.logging.WARNING)


class SharedTrial(FrozenTrial):
    """A FrozenTrial whose deep copy is itself: for a study nobody changes."""

    def __deepcopy__(self, memo: dict[int, Any]) -> SharedTrial:
        return self


def _numbers(values: list[Any]) -> list[float]:
    return [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]


def distribution(spec: dict[str, Any], seen: list[Any]) -> BaseDistribution:
    """The Optuna distribution of one ``space`` entry, widened to contain ``seen`` values."""
    kind = spec.get("type")
    if kind == "categorical":
        choices = list(spec.get("choices", []))
        choices += [v for v in dict.fromkeys(seen) if v not in choices]
        return CategoricalDistribution(choices)
    numbers = _numbers(seen)
    low = min([float(spec["low"]), *numbers])
    high = max([float(spec["high"]), *numbers])
    log = bool(spec.get("log")) and low > 0
    if kind == "int" and all(float(v).is_integer() for v in numbers):
        int_step = int(spec.get("step") or 1)
        if log or any((v - low) % int_step for v in numbers):
            int_step = 1
        return IntDistribution(int(low), int(high), log=log, step=int_step)
    step: float | None = spec.get("step")
    if step is not None and (
        log or any(abs((v - low) / step - round((v - low) / step)) > 1e-9 for v in numbers)
    ):
        step = None
    return FloatDistribution(low, high, log=log, step=step)


def _distributions(data: SweepData) -> dict[str, BaseDistribution]:
    out = {}
    for name, spec in data.space.items():
        seen = [t.params[name] for t in data.summary.trials if name in t.params]
        out[name] = distribution(spec, seen)
    return out


def _time(seconds: float | None) -> dt.datetime | None:
    return None if seconds is None else dt.datetime.fromtimestamp(seconds)


def _trial(data: SweepData, t: TrialSummary, dists: dict[str, BaseDistribution]) -> SharedTrial:
    state = _STATES.get(t.state, TrialState.FAIL)
    if state == TrialState.COMPLETE and not t.values:
        state = TrialState.FAIL  # finished without its objective: nothing to plot
    params = {k: v for k, v in t.params.items() if k in dists}
    record = data.records.get(t.number)
    objective = data.metrics[0]
    last = t.metrics.get(objective)
    intermediate = {}
    if t.last_step is not None and isinstance(last, (int, float)):
        intermediate = {int(t.last_step): float(last)}
    started = _time(record.started_at if record else None)
    finished = state.is_finished() and state != TrialState.WAITING
    trial = create_trial(
        state=state,
        values=t.values if state == TrialState.COMPLETE else None,
        params=params,
        distributions={k: dists[k] for k in params},
        intermediate_values=intermediate if not data.multi_objective else None,
        user_attrs={"number": t.number},
    )
    trial.__class__ = SharedTrial  # see the module docstring
    assert isinstance(trial, SharedTrial)
    # create_trial stamps "now"; the stored times make the timeline and durations true
    trial.datetime_start = started if state != TrialState.WAITING else None
    if finished:
        trial.datetime_complete = _time(record.ended_at if record else None) or started
    return trial


def build_study(data: SweepData) -> optuna.Study:
    """An in-memory study holding every trial of ``data``.

    Optuna numbers a study's trials 0, 1, ... in the order they are added; trials are added
    in the sweep's number order, so its numbers are the sweep's (which are contiguous from
    0), and the sweep's own number is kept as the user attribute ``number`` too. A trial
    Optuna cannot plot (COMPLETE without its objective) is entered as FAIL.
    """
    study = optuna.create_study(directions=cast(Any, data.directions))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(data.metrics[: len(data.directions)])
    dists = _distributions(data)
    study.add_trials([_trial(data, t, dists) for t in data.summary.trials])
    return study


def _best(study: optuna.Study, count: int) -> list[FrozenTrial]:
    """The ``count`` best COMPLETE trials (single objective), or the Pareto front."""
    if len(study.directions) > 1:
        return list(study.best_trials)
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    sign = -1.0 if study.direction == optuna.study.StudyDirection.MAXIMIZE else 1.0
    return sorted(done, key=lambda t: sign * float(t.value or 0.0))[:count]


def sample(study: optuna.Study, limit: int, best: int = 1) -> tuple[optuna.Study, int]:
    """A study of about ``limit`` of ``study``'s COMPLETE trials: the ``best`` best ones (the
    Pareto front when multi-objective) and evenly spaced others, by number. For plots whose
    cost grows faster than the trials (Optuna's contour draws a grid of every distinct x by
    every distinct y; its parallel coordinates build a plotly object per trial). Returns the
    study (``study`` itself when small enough) and the number of trials kept."""
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(done) <= limit:
        return study, len(done)
    kept = {t.number: t for t in _best(study, best)}
    step = math.ceil(len(done) / max(1, limit - len(kept)))
    kept.update((t.number, t) for t in done[::step])
    small = optuna.create_study(directions=study.directions)
    small.add_trials([copy.copy(t) for _, t in sorted(kept.items())])  # renumbered: copies
    return small, len(kept)


def sweep_number(trial: FrozenTrial) -> int:
    """The sweep's number of a trial of :func:`build_study` (Optuna's may differ)."""
    return int(trial.user_attrs.get("number", trial.number))


def importances(study: optuna.Study, objective: int = 0) -> dict[str, float]:
    """Each parameter's importance for ``objective`` (Optuna's default evaluator, PED-ANOVA);
    empty below two finished trials or without numeric variation."""
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(done) < 2 or not any(t.distributions for t in done):
        return {}
    target = None
    if len(study.directions) > 1:  # PED-ANOVA ranks what makes a given target *low*
        sign = -1.0 if study.directions[objective].name == "MAXIMIZE" else 1.0
        target = lambda t: sign * t.values[objective]  # noqa: E731
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # the note above, about low targets
            return dict(optuna.importance.get_param_importances(study, target=target))
    except (ValueError, RuntimeError, ZeroDivisionError):
        return {}
