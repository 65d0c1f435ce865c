"""Plotly figures of one sweep: its progress, learning curves and Optuna's analysis plots.

Optuna's plots are drawn on the sweep's in-memory study (:mod:`hyperfleet.dashboards.study`);
this module only picks what to show them (an objective of a multi-objective sweep, a pair of
parameters) and draws what Optuna has no plot for: the best value over wall time and learning
curves of any metric, by step or time, with the step where a trial was pruned marked.
"""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import optuna
import optuna.visualization as ov
import plotly.colors as pc
import plotly.graph_objects as go

from hyperfleet.dashboards.curves import Curve, downsample
from hyperfleet.dashboards.queries import SweepData
from hyperfleet.dashboards.study import sample
from hyperfleet.dashboards.ticks import readable_log_axes
from hyperfleet.spec.states import TrialState

XAxis = Literal["step", "elapsed", "time"]
X_LABELS: dict[str, str] = {
    "step": "step",
    "elapsed": "seconds since the trial started",
    "time": "wall clock",
}
HEIGHT = 380
TRIAL_COLOURS = tuple(pc.qualitative.Plotly)  # plotly's own default sequence, ten colours


def _layout(fig: go.Figure, title: str, height: int = HEIGHT) -> go.Figure:
    fig.update_layout(
        title={"text": title, "x": 0.0, "xanchor": "left"},
        height=height,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        legend={"orientation": "v"},
    )
    return fig


def _time(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds)


def best_over_time(data: SweepData) -> go.Figure:
    """Each COMPLETE trial's objective at the time it ended, and the best so far (a step
    line): is the sweep still improving?"""
    done = sorted(
        (
            (data.records[t.number].ended_at or 0.0, t.number, t.values[0])
            for t in data.summary.trials
            if t.state == TrialState.COMPLETE and t.values and t.number in data.records
        ),
    )
    maximize = data.directions[0] == "maximize"
    best: list[float] = []
    for _, _, value in done:
        best.append(value if not best else (max if maximize else min)(best[-1], value))
    times = [_time(end) for end, _, _ in done]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=times,
            y=[v for _, _, v in done],
            mode="markers",
            name=data.metrics[0],
            text=[f"trial {n}" for _, n, _ in done],
            marker={"color": "#9aa5b1", "size": 7},
        )
    )
    fig.add_trace(
        go.Scatter(x=times, y=best, mode="lines", name="best so far", line={"shape": "hv"})
    )
    fig.update_xaxes(title="trial end (wall clock)")
    fig.update_yaxes(title=data.metrics[0])
    return _layout(fig, "Best value over time")


def history(study: optuna.Study, target_name: str) -> go.Figure:
    """Optuna's optimisation history: every trial's value and the best so far, by trial."""
    return _layout(
        ov.plot_optimization_history(study, target_name=target_name), "Best value over trials"
    )


def _x(curve: Curve, axis: str) -> list[Any]:
    if axis == "step":
        return list(curve.steps)
    if axis == "elapsed":
        start = curve.times[0] if curve.times else 0.0
        return [t - start for t in curve.times]
    return [_time(t) for t in curve.times]


def trial_colour(number: int) -> str:
    """Trial ``number``'s colour on every page: plotly's palette by the trial's number, not by
    the order a figure drew it in."""
    return TRIAL_COLOURS[number % len(TRIAL_COLOURS)]


def learning_curves(
    curves: Mapping[int, Curve],
    states: Mapping[int, str],
    axis: str = "step",
    best: int | None = None,
    title: str | None = None,
    label: str = "trial",
) -> go.Figure:
    """One line per trial (downsampled, see :func:`~.curves.downsample`) in the trial's own
    colour (:func:`trial_colour`); the last point of a PRUNED trial is marked with an ✕ in
    that colour, the best trial's line is thicker."""
    fig = go.Figure()
    metric = next(iter(curves.values())).metric if curves else ""
    for number in sorted(curves):
        curve = downsample(curves[number])
        fig.add_trace(
            go.Scatter(
                x=_x(curve, axis),
                y=curve.values,
                mode="lines",
                name=f"{label} {number}" + (" ★" if number == best else ""),
                legendgroup=str(number),
                line={"width": 3.5 if number == best else 1.6, "color": trial_colour(number)},
            )
        )
        if states.get(number) == TrialState.PRUNED and len(curve):
            fig.add_trace(
                go.Scatter(
                    x=_x(curve, axis)[-1:],
                    y=curve.values[-1:],
                    mode="markers",
                    name=f"{label} {number} pruned",
                    legendgroup=str(number),
                    showlegend=False,
                    marker={"symbol": "x", "size": 12, "color": trial_colour(number)},
                    hovertext=f"trial {number} pruned at step {curve.steps[-1]}",
                )
            )
    fig.update_xaxes(title=X_LABELS.get(axis, axis))
    fig.update_yaxes(title=metric)
    return _layout(fig, title or f"{metric} by {X_LABELS.get(axis, axis)}")


def _target(study: optuna.Study, objective: int) -> Any:
    if len(study.directions) == 1:
        return None
    return lambda t: t.values[objective]


PARALLEL_TRIALS = 400
"""Trials drawn in parallel coordinates (a quarter of them the best): Optuna builds a plotly
object per trial, 2 s at 1,000 trials, and a thousand lines read as one band anyway."""


def parallel(study: optuna.Study, objective: int, name: str) -> go.Figure:
    small, kept = sample(study, PARALLEL_TRIALS, best=PARALLEL_TRIALS // 4)
    fig = ov.plot_parallel_coordinate(small, target=_target(small, objective), target_name=name)
    title = "Parallel coordinates"
    if small is not study:
        title += f" ({kept} trials: the best {PARALLEL_TRIALS // 4} and evenly spaced others)"
    return _layout(fig, title, height=420)


def importance(study: optuna.Study, objective: int, name: str) -> go.Figure:
    target = _target(study, objective)
    if target is not None and study.directions[objective].name == "MAXIMIZE":
        target = lambda t: -t.values[objective]  # noqa: E731 - PED-ANOVA ranks low values
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # PED-ANOVA's note on low targets
        fig = ov.plot_param_importances(study, target=target, target_name=name)
    return _layout(fig, f"Importance for {name}", height=320)


def slice_plot(study: optuna.Study, params: Sequence[str], objective: int, name: str) -> go.Figure:
    fig = ov.plot_slice(
        study, params=list(params), target=_target(study, objective), target_name=name
    )
    return _layout(readable_log_axes(fig), "Slice", height=360)


CONTOUR_TRIALS = 300
"""Trials a contour is drawn on: Optuna's grid has a cell per distinct x and y value, so its
size grows with the square of the trials (4 MB of JSON at 1,000 trials, 0.3 MB at 300)."""


def contour(study: optuna.Study, pair: Sequence[str], objective: int, name: str) -> go.Figure:
    """Optuna's contour of ``name`` over ``pair``, on at most ``CONTOUR_TRIALS`` trials."""
    small, kept = sample(study, CONTOUR_TRIALS, best=1)
    fig = ov.plot_contour(
        small, params=list(pair), target=_target(small, objective), target_name=name
    )
    title = f"Contour of {name} over {pair[0]} and {pair[1]}"
    if small is not study:
        title += f" ({kept} of the trials, evenly spaced, and the best)"
    return _layout(readable_log_axes(fig), title, height=460)


def edf(study: optuna.Study, objective: int, name: str) -> go.Figure:
    """Optuna's empirical distribution of ``name`` over the completed trials: the share of
    trials at or below each value (how often the search reaches a given quality)."""
    fig = ov.plot_edf(study, target=_target(study, objective), target_name=name)
    return _layout(fig, f"Empirical distribution of {name}", height=360)


def rank(study: optuna.Study, pair: Sequence[str], objective: int, name: str) -> go.Figure:
    """Optuna's rank plot over ``pair``: each trial coloured by its rank in ``name`` (robust
    to outliers where a contour's colour scale is not), on at most ``CONTOUR_TRIALS``."""
    small, kept = sample(study, CONTOUR_TRIALS, best=1)
    params = list(dict.fromkeys(pair))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        fig = ov.plot_rank(small, params=params, target=_target(small, objective), target_name=name)
    title = f"Rank of {name} over {' and '.join(params)}"
    if small is not study:
        title += f" ({kept} of the trials, evenly spaced, and the best)"
    return _layout(readable_log_axes(fig), title, height=460)


FRONT = "Pareto front"


def pareto(study: optuna.Study, metrics: Sequence[str]) -> go.Figure:
    """Optuna's Pareto-front plot, restyled so the front stands out: its trials (Optuna's
    "Best Trial" trace) large and red, joined by a line in two dimensions; the dominated ones
    small and grey."""
    fig = ov.plot_pareto_front(study, target_names=list(metrics[: len(study.directions)]))
    for trace in fig.data:
        front = "Best Trial" in (trace.hovertemplate or "")
        trace.update(name=FRONT if front else "dominated trials", showlegend=True)
        trace.marker.update(
            color="#d62728" if front else "#b8c2cc",
            size=12 if front else 7,
            colorscale=None,
            showscale=False,
        )
        if front and isinstance(trace, go.Scatter) and trace.x:
            order = sorted(range(len(trace.x)), key=lambda i: (trace.x[i], trace.y[i]))
            fig.add_trace(
                go.Scatter(
                    x=[trace.x[i] for i in order],
                    y=[trace.y[i] for i in order],
                    mode="lines",
                    name="front",
                    hoverinfo="skip",
                    line={"color": "#d62728", "width": 1, "shape": "hv"},
                )
            )
    return _layout(fig, FRONT, height=460)
