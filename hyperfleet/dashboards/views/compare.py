"""Compare: 2 to 8 trials side by side — what they reached, the parameters in which they
differ (each value that differs from the first trial's highlighted; of the outcome, only state
and steps, since every metric differs) and their learning curves on shared axes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
import streamlit as st

from hyperfleet.dashboards import charts, scales, state, widgets
from hyperfleet.dashboards.format import duration, number
from hyperfleet.dashboards.queries import SweepData
from hyperfleet.dashboards.tables import METRIC, param_diff

MIN_TRIALS, MAX_TRIALS = 2, 8
HIGHLIGHT = "background-color: #fff3c4; font-weight: 600"


def _outcomes(data: SweepData, chosen: list[int]) -> pd.DataFrame:
    trials = {t.number: t for t in data.summary.trials}
    rows: dict[str, list[Any]] = {"state": [], "steps": [], "duration": []}
    for metric in data.reported_metrics():  # prefixed: a metric may be named "state"
        rows[METRIC + metric] = []
    for n in chosen:
        t = trials[n]
        rows["state"].append(t.state)
        rows["steps"].append("-" if t.last_step is None else str(t.last_step))
        rows["duration"].append(duration(t.duration_s))
        for metric in data.reported_metrics():
            rows[METRIC + metric].append(number(t.metrics.get(metric)))
    return pd.DataFrame.from_dict(rows, orient="index", columns=[f"trial {n}" for n in chosen])


def _highlight(frame: pd.DataFrame, rows: Sequence[str] | None = None) -> Any:
    """A Styler that marks each cell differing from its row's first cell, in ``rows`` (all
    rows when None): a continuous metric differs in every trial, so marking it says nothing."""

    def row(values: pd.Series) -> list[str]:
        if rows is not None and values.name not in rows:
            return [""] * len(values)
        first = values.iloc[0]
        return ["" if i == 0 or v == first else HIGHLIGHT for i, v in enumerate(values)]

    return frame.style.apply(row, axis=1)


def body(url: str, name: str) -> None:
    data = state.sweep(url, name)
    cfg = state.settings()
    st.title(f"Compare trials of {name}")
    state.freshness(data.fetched_at, data.running)
    trials = {t.number: t for t in data.summary.trials}
    if len(trials) < MIN_TRIALS:
        st.info(f"Comparing needs {MIN_TRIALS} trials; {name} has {len(trials)} so far.")
        return
    metric, axis, chosen = widgets.curve_controls(
        data, "compare", default_count=3, max_trials=MAX_TRIALS
    )
    if len(chosen) < MIN_TRIALS:
        st.info(f"Pick {MIN_TRIALS} to {MAX_TRIALS} trials to compare.")
        return
    st.subheader("Outcome")
    st.table(_highlight(_outcomes(data, chosen), rows=("state", "steps")))
    st.subheader("Parameters that differ")
    diff = param_diff({n: dict(trials[n].params) for n in chosen})
    if diff.empty:
        st.info("These trials ran with the same parameters.")
    else:
        st.table(_highlight(diff.map(number)))
        same = len({k for n in chosen for k in trials[n].params}) - len(diff)
        st.caption(f"{same} parameter(s) with the same value in every chosen trial left out")
    st.subheader("Curves")
    found = state.curves(state.tracking_uri(cfg, data), data, chosen, metric)
    if found:
        states = {n: trials[n].state for n in chosen}
        choice = widgets.scale_switch(st, f"scale-compare-curves-{name}")
        fig = charts.learning_curves(found, states, axis, title=f"{metric} of the chosen trials")
        widgets.show(st, fig, "compare-curves", scales.axis(fig, "y", choice, metric))
    else:
        st.info(f"No {metric} reported by the chosen trials yet.")


def main() -> None:
    cfg = state.settings()
    name = st.session_state.get("sweep")
    if not name:
        st.title("Compare")
        st.info(f"No sweeps yet. Start one with `{state.START_HINT}`.")
        return
    running = state.sweep(cfg.storage, name).running
    state.live(lambda: body(cfg.storage, name), running, f"compare-{name}")


main()
