"""Plotly figures of one sweep: its progress, learning curves and Optuna's analysis plots.

Optuna's plots are drawn on the sweep's in-memory study (:mod:`hyperfleet.dashboards.study`);
this module only picks what to show them (an objective of a multi-objective sweep, a pair of
parameters) and draws what Optuna has no plot for: the best value over wall time and learning
curves of any metric, by step or time, by state, with the step where a trial was pruned
marked. Over a categorical parameter the contour becomes a heatmap with a cell per category
(:mod:`~hyperfleet.dashboards.heatmap`); the pages put each chart's value axis on the scale
its switch and values call for (:mod:`~hyperfleet.dashboards.scales`).
"""

from __future__ import annotations

import bisect
import datetime as dt
import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import optuna
import optuna.visualization as ov
import plotly.graph_objects as go

from hyperfleet.dashboards import palette, scales
from hyperfleet.dashboards.curves import Curve, downsample
from hyperfleet.dashboards.format import number as readable
from hyperfleet.dashboards.heatmap import category_heatmap, has_categorical
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
LEGEND_ORDER = (
    TrialState.COMPLETE, TrialState.RUNNING, TrialState.PAUSED, TrialState.WAITING,
    TrialState.PRUNED, TrialState.FAIL,
)  # fmt: skip
"""The order of learning curves in the legend: completed, at work, then cut short."""
SUFFIX: dict[str, str] = {
    TrialState.RUNNING: " (running)", TrialState.PAUSED: " (paused)",
    TrialState.WAITING: " (waiting)", TrialState.PRUNED: " (pruned)", TrialState.FAIL: " (failed)",
}  # fmt: skip
DASH: dict[str, str] = {
    TrialState.RUNNING: "dashdot",
    TrialState.PRUNED: "dash",
    TrialState.FAIL: "dot",
}


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
    """Trial ``number``'s colour on every page, by the trial's number, not by the order a
    figure drew it in; no two trials share one (:mod:`~hyperfleet.dashboards.palette`)."""
    return palette.colour(number)


def _rank(state: str | None) -> int:
    """A legend rank that lists the curves by state (``LEGEND_ORDER``), by number within."""
    order = LEGEND_ORDER.index(state) if state in LEGEND_ORDER else len(LEGEND_ORDER)
    return 1000 + order


def learning_curves(
    curves: Mapping[int, Curve],
    states: Mapping[int, str],
    axis: str = "step",
    best: int | None = None,
    title: str | None = None,
    label: str = "trial",
) -> go.Figure:
    """One line per trial (downsampled, see :func:`~.curves.downsample`) in the trial's own
    colour (:func:`trial_colour`), listed by state in the legend (``LEGEND_ORDER``), dashed
    unless COMPLETE; the step where a PRUNED trial was pruned (its last report) is marked
    with an ✕ in its colour, the best trial's line is thicker."""
    fig = go.Figure()
    metric = next(iter(curves.values())).metric if curves else ""
    for number in sorted(curves):
        curve = downsample(curves[number])
        state = states.get(number)
        colour = trial_colour(number)
        name = f"{label} {number}" + SUFFIX.get(state or "", "")
        fig.add_trace(
            go.Scatter(
                x=_x(curve, axis),
                y=curve.values,
                mode="lines",
                name=name + (" ★" if number == best else ""),
                legendgroup=str(number),
                legendrank=_rank(state),
                line={
                    "width": 3.5 if number == best else 1.6,
                    "color": colour,
                    "dash": DASH.get(state or "", "solid"),
                },
            )
        )
        if state == TrialState.PRUNED and len(curve):
            fig.add_trace(
                go.Scatter(
                    x=_x(curve, axis)[-1:],
                    y=curve.values[-1:],
                    mode="markers",
                    name=f"{label} {number} pruned",
                    legendgroup=str(number),
                    showlegend=False,
                    marker={"symbol": "x", "size": 12, "color": colour},
                    hovertext=f"{label} {number} pruned at step {curve.steps[-1]}",
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


def objective_values(study: optuna.Study, objective: int) -> list[float]:
    """``objective``'s value in each COMPLETE trial: what the analysis charts draw."""
    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    return [float(t.values[objective]) for t in done if t.values]


def parallel(study: optuna.Study, objective: int, name: str, log: bool = False) -> go.Figure:
    """Optuna's parallel coordinates, the objective's axis first; with ``log`` (positive
    values only: :func:`~.scales.decide`) that axis is drawn in log10, labelled in values."""
    small, kept = sample(study, PARALLEL_TRIALS, best=PARALLEL_TRIALS // 4)
    target = _target(small, objective)
    if log:
        value = target or (lambda t: t.value)
        target = lambda t: math.log10(value(t))  # noqa: E731
    label = f"{name} (log)" if log else name
    fig = ov.plot_parallel_coordinate(small, target=target, target_name=label)
    if log:
        _objective_ticks(fig, [math.log10(v) for v in objective_values(small, objective)])
    title = "Parallel coordinates"
    if small is not study:
        title += f" ({kept} trials: the best {PARALLEL_TRIALS // 4} and evenly spaced others)"
    return _layout(fig, title, height=420)


def _objective_ticks(fig: go.Figure, logged: list[float]) -> None:
    """Optuna's parallel coordinates label each axis with annotations at ``x`` = the axis's
    index over values scaled to [0, 1]: the objective's (index 0) get round real values at
    their log10 positions, as do the colour bar (the lines are coloured by the objective) and
    the hover."""
    if not logged or min(logged) == max(logged):
        return
    low, high = min(logged), max(logged)
    kept = [a for a in fig.layout.annotations if a.x != 0]
    first = next((a for a in fig.layout.annotations if a.x == 0), None)
    style = first.to_plotly_json() if first is not None else {"x": 0, "showarrow": False}
    vals, texts = scales.log10_ticks(logged)
    ticks = [
        {**style, "text": t, "y": (v - low) / (high - low)}
        for v, t in zip(vals, texts, strict=True)
    ]
    fig.layout.annotations = [*ticks, *kept]
    for trace in fig.data:
        marker = getattr(trace, "marker", None)
        if marker is not None and marker.showscale:  # the lines' colour bar: same values
            marker.colorbar.update(tickvals=vals, ticktext=texts)
        data = trace.customdata
        if data is not None and len(data) and len(data[0]) == 2:
            value = float(data[0][1])
            trace.customdata = [[data[0][0], readable(10**value)], *data[1:]]


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
    """Optuna's contour of ``name`` over ``pair``, on at most ``CONTOUR_TRIALS`` trials; over
    a categorical parameter, a heatmap with a cell per category instead (a contour would
    interpolate between categories: :mod:`~hyperfleet.dashboards.heatmap`)."""
    if has_categorical(study, pair):
        title = f"Best {name} by {pair[0]} and {pair[1]}, a cell per category"
        return _layout(category_heatmap(study, pair, objective, name), title, height=460)
    small, kept = sample(study, CONTOUR_TRIALS, best=1)
    fig = ov.plot_contour(
        small, params=list(pair), target=_target(small, objective), target_name=name
    )
    title = f"Contour of {name} over {pair[0]} and {pair[1]}"
    if small is not study:
        title += f" ({kept} of the trials, evenly spaced, and the best)"
    return _layout(readable_log_axes(fig), title, height=460)


def edf(study: optuna.Study, objective: int, name: str) -> go.Figure:
    """The empirical distribution of ``name`` over the completed trials, as optuna-dashboard
    draws it: the share of trials at or below each value (how often the search reaches a
    given quality). Drawn exactly, a step at each distinct value, where Optuna's plot samples
    a hundred evenly spaced values, which on a log axis leaves out all but the top decades."""
    values = sorted(objective_values(study, objective))
    distinct = sorted(set(values))
    shares = [bisect.bisect_right(values, v) / len(values) for v in distinct]
    fig = go.Figure(go.Scatter(x=distinct, y=shares, mode="lines", line={"shape": "hv"}, name=name))
    fig.update_xaxes(title=name)
    fig.update_yaxes(title="share of trials at or below", range=[0, 1])
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
