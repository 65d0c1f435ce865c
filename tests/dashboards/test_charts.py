"""The chart builders on hand-made inputs: value axes that turn logarithmic over decades (and
the switch that overrides it), no surface drawn across a categorical, learning curves by state
with their prune marks, colours that never repeat within a chart, and page scripts that write
nothing but what they mean to."""

from __future__ import annotations

import ast
import math
import pickle
from pathlib import Path
from typing import Any

import optuna
import plotly.graph_objects as go
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import create_trial

from hyperfleet.dashboards import charts, palette, scales
from hyperfleet.dashboards.curves import Curve
from hyperfleet.spec.states import TrialState

VIEWS = Path(charts.__file__).resolve().parent / "views"


def _curve(trial: int, values: list[float]) -> Curve:
    steps = list(range(1, len(values) + 1))
    return Curve(trial, "loss", steps, values, [float(s) for s in steps])


def _line(fig: go.Figure, name: str) -> Any:
    return next(t for t in fig.data if t.name == name)


# -- log scale -----------------------------------------------------------------------------------


def test_values_over_three_decades_get_a_log_axis_by_themselves() -> None:
    curves = {0: _curve(0, [2.0, 1.0, 0.5]), 1: _curve(1, [3.0, 1e6, 1e13])}  # one diverged
    states = {0: TrialState.COMPLETE, 1: TrialState.COMPLETE}
    fig = charts.learning_curves(curves, states)
    scale = scales.axis(fig, "y", scales.AUTO, "loss")
    assert fig.layout.yaxis.type == "log" and scale.log and scale.automatic
    assert scale.caption is not None and "automatically" in scale.caption
    assert "13 decades" in scale.caption and "loss" in scale.caption
    narrow = charts.learning_curves({0: curves[0]}, states)
    kept = scales.axis(narrow, "y", scales.AUTO, "loss")  # 0.5 to 2: not even one decade
    assert narrow.layout.yaxis.type != "log" and not kept.log and kept.caption is None


def test_the_switch_overrides_the_automatic_scale() -> None:
    curves = {1: _curve(1, [3.0, 1e6, 1e13])}
    states = {1: TrialState.COMPLETE}
    linear = charts.learning_curves(curves, states)
    scale = scales.axis(linear, "y", scales.LINEAR, "loss")
    assert linear.layout.yaxis.type == "linear" and not scale.log and scale.caption is None
    narrow = charts.learning_curves({1: _curve(1, [2.0, 1.0])}, states)
    forced = scales.axis(narrow, "y", scales.LOG, "loss")
    assert narrow.layout.yaxis.type == "log" and forced.log and not forced.automatic
    negative = charts.learning_curves({1: _curve(1, [-2.0, 1.0, 1e6])}, states)
    refused = scales.axis(negative, "y", scales.LOG, "loss")  # a log axis would drop -2
    assert negative.layout.yaxis.type != "log" and not refused.log
    assert refused.caption is not None and "≤ 0" in refused.caption


def test_every_subplot_of_a_slice_and_both_axes_of_a_front_turn_log() -> None:
    study = _study(diverged=True)
    fig = charts.slice_plot(study, ["lr", "width"], 0, "loss")
    scales.axis(fig, "y", scales.AUTO, "loss")
    yaxes = [fig.layout[n] for n in fig.layout if n.startswith("yaxis")]
    assert len(yaxes) == 2 and all(a.type == "log" for a in yaxes)
    edf = charts.edf(study, 0, "loss")  # the values are on x there
    assert scales.axis(edf, "x", scales.AUTO, "loss").log and edf.layout.xaxis.type == "log"
    assert list(edf.data[0].x)[:2] == [1.0, 1.1], "every value on the log axis, the low ones too"
    cached = pickle.loads(pickle.dumps(charts.slice_plot(study, ["lr"], 0, "loss")))
    assert scales.axis(cached, "y", scales.AUTO, "loss").log  # a cache's copy: typed arrays


def test_a_contours_colour_and_parallel_coordinates_take_the_log_of_their_values() -> None:
    study = _study(diverged=True)
    contour = charts.contour(study, ("lr", "width"), 0, "loss")
    assert scales.colour(contour, scales.AUTO, "loss").log
    (surface,) = [t for t in contour.data if t.type == "contour"]
    zs = [z for row in surface.z for z in row if z is not None and not math.isnan(z)]
    assert max(zs) == pytest.approx(13.0, abs=0.5) and surface.colorbar.ticktext
    scale = scales.decide(charts.objective_values(study, 0), scales.AUTO, "loss")
    assert scale.log and scale.automatic
    parallel = charts.parallel(study, 0, "loss", log=scale.log)
    assert parallel.layout.xaxis.ticktext[0] == "loss (log)"
    ticks = {a.text: a.y for a in parallel.layout.annotations if a.x == 0}
    assert len(ticks) >= 3 and "1" in ticks and ticks["1"] == pytest.approx(0.0)
    for text, y in ticks.items():  # round values at their log10 positions over 1 to 1e13
        assert y == pytest.approx(math.log10(float(text)) / 13), text
    (bar,) = [t.marker.colorbar for t in parallel.data if t.marker and t.marker.showscale]
    assert set(bar.ticktext) == set(ticks)


def test_a_front_of_three_objectives_turns_its_scenes_axes() -> None:
    study = optuna.create_study(directions=["minimize"] * 3)
    dists = {"x": FloatDistribution(0, 1)}
    for i in range(6):
        values = [10.0 ** (2 * i), 1.0 + i, 6.0 - i]  # only the first spans decades
        study.add_trial(create_trial(params={"x": i / 6}, distributions=dists, values=values))
    fig = charts.pareto(study, ["loss", "cost", "time"])
    found = [scales.axis(fig, a, scales.AUTO, m) for a, m in zip("xyz", ["loss", "cost", "time"],
                                                                  strict=True)]  # fmt: skip
    assert [s.log for s in found] == [True, False, False]
    assert fig.layout.scene.xaxis.type == "log" and fig.layout.scene.yaxis.type == "linear"


# -- categoricals ------------------------------------------------------------------------------


def _study(diverged: bool = False, categorical: bool = False) -> optuna.Study:
    """Eight finished trials over ``lr`` (log) and ``width``, or ``opt`` (sgd or adam)."""
    study = optuna.create_study()
    dists: dict[str, Any] = {"lr": FloatDistribution(1e-4, 1e-1, log=True)}
    if categorical:
        dists["opt"] = CategoricalDistribution(["sgd", "adam"])
    else:
        dists["width"] = FloatDistribution(16, 256)
    for i in range(8):
        params = {"lr": 10 ** (-4 + 3 * i / 7)}
        if categorical:
            params["opt"] = "sgd" if i % 2 else "adam"
        else:
            params["width"] = 16 + 30 * i
        value = 1e13 if diverged and i in (2, 5) else 1.0 + i / 10
        study.add_trial(create_trial(params=params, distributions=dists, value=value))
    return study


def test_no_surface_is_drawn_across_a_categorical() -> None:
    study = _study(categorical=True)
    fig = charts.contour(study, ("lr", "opt"), 0, "loss")
    assert not [t for t in fig.data if t.type == "contour"], "interpolated between categories"
    (heat,) = [t for t in fig.data if t.type == "heatmap"]
    assert list(heat.y) == ["sgd", "adam"]  # a row per category, in the space's order
    cells = [(y, x, z) for y, row in zip(heat.y, heat.z, strict=True)
             for x, z in zip(heat.x, row, strict=True)
             if z is not None and not math.isnan(z)]  # fmt: skip
    trials = study.get_trials()
    assert len(cells) <= len(trials)
    for y, _, z in cells:  # each cell is the best value of trials that ran with its category
        assert z in [t.value for t in trials if t.params["opt"] == y]
    both = charts.contour(study, ("opt", "opt"), 0, "loss")
    assert not [t for t in both.data if t.type == "contour"]


# -- learning curves: by state, pruned marked, colours that never repeat -------------------------


def test_learning_curves_by_state_mark_where_each_pruned_trial_stopped() -> None:
    curves = {n: _curve(n, [3.0, 2.0, 1.5, 1.2][: 4 - n % 3]) for n in range(6)}
    states = {
        0: TrialState.COMPLETE, 1: TrialState.PRUNED, 2: TrialState.FAIL,
        3: TrialState.COMPLETE, 4: TrialState.PRUNED, 5: TrialState.RUNNING,
    }  # fmt: skip
    fig = charts.learning_curves(curves, states, best=3)
    lines = {t.name: t for t in fig.data if t.mode == "lines"}
    assert set(lines) == {"trial 0", "trial 3 ★", "trial 1 (pruned)", "trial 2 (failed)",
                          "trial 4 (pruned)", "trial 5 (running)"}  # fmt: skip
    ranks = {name: line.legendrank for name, line in lines.items()}
    assert ranks["trial 0"] < ranks["trial 5 (running)"] < ranks["trial 1 (pruned)"]
    assert ranks["trial 4 (pruned)"] < ranks["trial 2 (failed)"]  # the legend lists by state
    assert lines["trial 1 (pruned)"].line.dash != lines["trial 0"].line.dash
    for n in (1, 4):
        mark = _line(fig, f"trial {n} pruned")
        assert list(mark.x) == [curves[n].steps[-1]] and mark.marker.symbol == "x"
        assert mark.marker.color == lines[f"trial {n} (pruned)"].line.color


def test_no_colour_repeats_within_a_chart() -> None:
    numbers = range(0, 60, 2)  # 30 trials: three times plotly's ten colours
    curves = {n: _curve(n, [1.0, 0.5]) for n in numbers}
    fig = charts.learning_curves(curves, dict.fromkeys(numbers, TrialState.COMPLETE))
    colours = [t.line.color for t in fig.data]
    assert len(set(colours)) == len(colours) == 30
    assert palette.colours(10) == list(palette.BASE)  # the first ten are plotly's own
    many = palette.colours(2000)
    assert len(set(many)) == 2000 and all(c.startswith("#") and len(c) == 7 for c in many)
    assert palette.colours(40)[:25] == palette.colours(25), "a trial keeps its colour"
    assert charts.trial_colour(37) == palette.colour(37)


# -- nothing written by Streamlit's magic --------------------------------------------------------


def _magic_written(tree: ast.Module) -> list[int]:
    """The lines of expression statements Streamlit's magic writes to the page: any but a call,
    a docstring, ``await`` and ``yield`` (``streamlit/runtime/scriptrunner/magic.py``)."""
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                docstrings.add(id(body[0]))
    skipped = (ast.Call, ast.Await, ast.Yield, ast.YieldFrom)
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and id(node) not in docstrings
        and not isinstance(node.value, skipped)
    ]


@pytest.mark.parametrize("page", [*sorted(p.name for p in VIEWS.glob("*.py")), "../app.py"])
def test_a_page_script_has_no_bare_expression_for_magic_to_print(page: str) -> None:
    """A string under a constant (an attribute's docstring) or a bare name in a page script is
    printed on the page by Streamlit's magic."""
    path = VIEWS / page
    assert _magic_written(ast.parse(path.read_text())) == [], path.name
