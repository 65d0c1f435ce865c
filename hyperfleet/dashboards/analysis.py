"""The Sweep page's "What matters" section: parameter importance, parallel coordinates, a
slice, contour and rank plot for a chosen pair and the objective's empirical distribution
(EDF, as optuna-dashboard draws them), all drawn by Optuna on the sweep's in-memory study
and cached until a trial finishes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import streamlit as st

from hyperfleet.dashboards import charts, scales, state, widgets
from hyperfleet.dashboards.queries import SweepData
from hyperfleet.dashboards.study import importances
from hyperfleet.spec.states import TrialState

MIN_TRIALS = 2


@dataclass(frozen=True)
class _Draw:
    """Draws one of the sweep's figures (a snapshot's, ``fp``) into a column, cached by
    :func:`.state.derived` under its kind, which is also its widget key; with ``values``
    (``"x"``, ``"y"`` or ``"colour"``: where the figure's values are), under a scale switch
    (:mod:`~hyperfleet.dashboards.scales`), applied to the cache's copy."""

    data: SweepData
    url: str
    fp: str
    name: str  # the objective drawn

    def switch(self, column: Any, kind: str) -> str:
        return widgets.scale_switch(column, f"scale-{kind}-{self.data.name}")

    def __call__(
        self,
        column: Any,
        kind: str,
        args: tuple[Any, ...],
        figure: Callable[[], Any],
        values: str | None = None,
    ) -> None:
        choice = self.switch(column, kind) if values else scales.AUTO
        fig = state.derived(kind, self.url, self.data.name, self.fp, args, figure)
        found = []
        if values in ("x", "y"):
            found.append(scales.axis(fig, values, choice, self.name))
        elif values == "colour":
            found.append(scales.colour(fig, choice, self.name))
        widgets.show(column, fig, kind, *found)


def _objective(data: SweepData) -> int:
    if not data.multi_objective:
        return 0
    return int(
        st.selectbox(
            "objective",
            range(len(data.metrics[: len(data.directions)])),
            format_func=lambda i: data.metrics[i],
            key=f"objective-{data.name}",
        )
    )


def _importance(data: SweepData, url: str, objective: int, name: str) -> None:
    fp = data.fingerprint()
    study = state.study(url, data.name, fp, data)
    ranked = state.derived(
        "importances", url, data.name, fp, (objective,), lambda: importances(study, objective)
    )
    if ranked:
        top, share = next(iter(ranked.items()))
        st.markdown(f"**{top}** matters most for {name} ({share:.0%} of the importance).")
    left, right = st.columns([2, 3])
    draw = _Draw(data, url, fp, name)
    draw(left, "importance", (objective,), lambda: charts.importance(study, objective, name))
    values = charts.objective_values(study, objective)
    scale = scales.decide(values, draw.switch(right, "parallel"), name)
    fig = state.derived(
        "parallel",
        url,
        data.name,
        fp,
        (objective, scale.log),
        lambda: charts.parallel(study, objective, name, log=scale.log),
    )
    widgets.show(right, fig, "parallel", scale)


def _pair(data: SweepData, url: str, objective: int, name: str) -> None:
    params = list(data.space)
    a, b = st.columns(2)
    first = a.selectbox("parameter", params, index=0, key=f"pair-a-{data.name}")
    others = [p for p in params if p != first] or params
    second = b.selectbox("against", others, index=0, key=f"pair-b-{data.name}")
    fp = data.fingerprint()
    study = state.study(url, data.name, fp, data)
    left, right = st.columns(2)
    pair = (first, second)
    draw = _Draw(data, url, fp, name)
    slice_ = lambda: charts.slice_plot(study, pair, objective, name)  # noqa: E731
    draw(left, "slice", (objective, pair), slice_, values="y")
    if first != second:
        contour = lambda: charts.contour(study, pair, objective, name)  # noqa: E731
        draw(right, "contour", (objective, pair), contour, values="colour")
    st.markdown("**Distribution and rank**")
    left, right = st.columns(2)
    draw(left, "edf", (objective,), lambda: charts.edf(study, objective, name), values="x")
    draw(right, "rank", (objective, pair), lambda: charts.rank(study, pair, objective, name))


POPULATION_REASON = (
    "Not drawn for a population-based sweep: its members change their hyperparameters while "
    "they train, so their final values measure schedules, not the parameters they started "
    "with. The Population page shows what each member ran with and when."
)


def render(data: SweepData, url: str) -> None:
    st.subheader("What matters")
    if data.is_population:
        st.info(POPULATION_REASON)
        return
    done = [t for t in data.summary.trials if t.state == TrialState.COMPLETE and t.values]
    if len(done) < MIN_TRIALS:
        st.info(
            f"Importance and the analysis charts need {MIN_TRIALS} completed trials; "
            f"{len(done)} so far."
        )
        return
    if not data.space:
        st.info("This sweep searches no parameters.")
        return
    objective = _objective(data)
    name = data.metrics[objective]
    _importance(data, url, objective, name)
    st.markdown("**Slice and contour**")
    _pair(data, url, objective, name)
