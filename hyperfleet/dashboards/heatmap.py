"""A pair of parameters of which one is categorical: a heatmap with a cell per category.

Optuna's contour plot places a categorical's choices at positions 0, 1, … and interpolates
the objective over the plane between them, so it draws values at "halfway between sgd and
adam" that no trial ran and no trial could. Over such a pair the dashboard draws a heatmap
instead, in which nothing is interpolated:

* a categorical parameter gets a row (or column) per choice, in the search space's order;
* a numeric one is cut into at most ``BINS`` equal bins (equal in ``log10`` for a parameter
  searched on a log scale), each labelled with its range;
* a cell's colour is the best objective value among the trials that ran in it (the lowest
  when minimised, the highest when maximised), its hover the count of those trials; a cell
  no trial ran in stays empty.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
import plotly.graph_objects as go
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import TrialState

from hyperfleet.dashboards.format import number

BINS = 8


def _distributions(study: optuna.Study) -> dict[str, BaseDistribution]:
    """Each parameter's distribution, from the trials that have it (a conditional parameter is
    in some trials only)."""
    out: dict[str, BaseDistribution] = {}
    for t in study.get_trials(deepcopy=False):
        for name, dist in t.distributions.items():
            out.setdefault(name, dist)
    return out


def has_categorical(study: optuna.Study, pair: Sequence[str]) -> bool:
    """Whether a parameter of ``pair`` is categorical in ``study``."""
    dists = _distributions(study)
    return any(isinstance(dists.get(p), CategoricalDistribution) for p in pair)


@dataclass(frozen=True)
class Cells:
    """One axis of the heatmap: its labels, and the cell a parameter value falls in."""

    labels: list[str]
    index: Callable[[Any], int | None]


def categories(dist: CategoricalDistribution) -> Cells:
    choices = list(dist.choices)
    return Cells([str(c) for c in choices], lambda v: choices.index(v) if v in choices else None)


def bins(values: Sequence[float], log: bool, count: int = BINS) -> Cells:
    """At most ``count`` equal bins over ``values`` (equal in log10 when ``log``)."""
    low, high = min(values), max(values)
    distinct = len(set(values))
    if distinct == 1 or low == high:
        return Cells([number(low)], lambda v: 0)
    n = min(count, distinct)
    to = math.log10 if log and low > 0 else (lambda v: v)
    back = (lambda v: 10.0**v) if log and low > 0 else (lambda v: v)
    lo, hi = to(low), to(high)
    edges = [back(lo + (hi - lo) * i / n) for i in range(n + 1)]
    labels = [f"{number(edges[i])}–{number(edges[i + 1])}" for i in range(n)]

    def index(v: Any) -> int | None:
        if not isinstance(v, (int, float)):
            return None
        return min(n - 1, max(0, bisect.bisect_right(edges, v) - 1))

    return Cells(labels, index)


def _cells(dist: BaseDistribution | None, values: Sequence[Any]) -> Cells:
    if isinstance(dist, CategoricalDistribution):
        return categories(dist)
    log = isinstance(dist, (FloatDistribution, IntDistribution)) and dist.log
    return bins([float(v) for v in values], log)


def category_heatmap(
    study: optuna.Study, pair: Sequence[str], objective: int, name: str
) -> go.Figure:
    """The best ``name`` per cell over ``pair`` (see the module docstring); a pair of one
    parameter twice is a single row."""
    first, second = pair[0], pair[1]
    done = [
        t
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.values is not None and first in t.params and second in t.params
    ]
    dists = _distributions(study)
    xs = _cells(dists.get(first), [t.params[first] for t in done] or [0.0])
    same = first == second
    ys = Cells(["all trials"], lambda v: 0) if same else _cells(
        dists.get(second), [t.params[second] for t in done] or [0.0]
    )  # fmt: skip
    maximize = study.directions[objective] == optuna.study.StudyDirection.MAXIMIZE
    best: list[list[float | None]] = [[None] * len(xs.labels) for _ in ys.labels]
    count = [[0] * len(xs.labels) for _ in ys.labels]
    for t in done:
        col, row = xs.index(t.params[first]), ys.index(t.params[second])
        if col is None or row is None:
            continue
        value = float(t.values[objective])
        old = best[row][col]
        if old is None or (value > old if maximize else value < old):
            best[row][col] = value
        count[row][col] += 1
    fig = go.Figure(
        go.Heatmap(
            x=xs.labels,
            y=ys.labels,
            z=best,
            customdata=count,
            hovertemplate=f"{first} %{{x}}<br>{second} %{{y}}<br>best {name} %{{z:.4g}}"
            "<br>%{customdata} trial(s)<extra></extra>",
            colorscale="Blues",
            reversescale=not maximize,  # the better, the darker
            colorbar={"title": {"text": name}},
            xgap=2,
            ygap=2,
            hoverongaps=False,
        )
    )
    fig.update_xaxes(title=first, type="category")
    fig.update_yaxes(title="" if same else second, type="category")
    return fig
