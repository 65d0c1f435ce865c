"""Sweep: one sweep's trials table, a trial's details, progress, learning curves, the Pareto
front (multi-objective) and which parameters matter (importance, parallel coordinates, slice,
contour), all drawn on the same trial rows ``sweep status`` prints."""

from __future__ import annotations

import streamlit as st

from hyperfleet.dashboards import analysis, charts, queries, scales, state, widgets
from hyperfleet.dashboards.queries import SweepData
from hyperfleet.dashboards.tables import filter_trials, trials_frame
from hyperfleet.platform.storage.results import ENDINGS
from hyperfleet.spec.states import TrialState


def _header(data: SweepData, uri: str) -> None:
    st.title(f"Sweep {data.name}")
    objective = ", ".join(
        f"{m} ({'max' if d == 'maximize' else 'min'})"
        for m, d in zip(data.metrics, data.directions, strict=True)
    )
    st.caption(f"objective {objective} · scheduler {data.scheduler} · {data.status}")
    state.freshness(data.fetched_at, data.running)
    counts = data.summary.state_counts
    cols = st.columns(6)
    for col, name in zip(cols, (*ENDINGS, TrialState.RUNNING), strict=False):
        col.metric(name, counts.get(name, 0))
    best = data.best()
    if data.multi_objective:
        cols[4].metric("on the Pareto front", len(data.summary.pareto_front()))
    else:
        label = f"best {data.metrics[0]}"
        cols[4].metric(
            label,
            "-" if best is None or not best.values else f"{best.values[0]:.4g}",
            help=None if best is None else f"trial {best.number}",
        )
    budget = data.config.budget.trials or queries.budget(data.config)
    done = sum(counts.get(s, 0) for s in ENDINGS)
    cols[5].metric("progress", f"{done} / {budget or '?'}")


def _trials(data: SweepData, uri: str) -> None:
    st.subheader("Trials")
    frame = trials_frame(data, uri)
    if frame.empty:
        st.info("No trial has started yet.")
        return
    shown = filter_trials(frame, *widgets.trial_filters(data, frame))
    st.dataframe(
        shown,
        hide_index=True,
        width="stretch",
        column_config=widgets.trial_columns(shown, data),
        key="trials",
    )
    st.caption(f"{len(shown)} of {len(frame)} trials")
    widgets.trial_details(data, uri)


def _progress(data: SweepData, url: str) -> None:
    st.subheader("Progress")
    if data.multi_objective:
        st.info("A multi-objective sweep has no single best value: see the Pareto front below.")
        return
    if not any(t.state == TrialState.COMPLETE for t in data.summary.trials):
        st.info("No completed trial yet: progress appears with the first one.")
        return
    study = state.study(url, data.name, data.fingerprint(), data)
    left, right = st.columns(2)
    fp, name = data.fingerprint(), data.metrics[0]
    choice = widgets.scale_switch(left, f"scale-history-{data.name}")
    fig = state.derived("history", url, data.name, fp, (), lambda: charts.history(study, name))
    widgets.show(left, fig, "history", scales.axis(fig, "y", choice, name))
    choice = widgets.scale_switch(right, f"scale-best-time-{data.name}")
    fig = charts.best_over_time(data)
    widgets.show(right, fig, "best-time", scales.axis(fig, "y", choice, name))


def _curves(data: SweepData, uri: str) -> None:
    st.subheader("Learning curves")
    metric, axis, chosen = widgets.curve_controls(data, "sweep", default_count=5)
    if not chosen:
        st.info("Pick trials to draw their curves.")
        return
    found = state.curves(uri, data, chosen, metric)
    if not found:
        st.info(f"No {metric} reported by the chosen trials yet.")
        return
    states = {t.number: t.state for t in data.summary.trials}
    best = data.best()
    choice = widgets.scale_switch(st, f"scale-curves-{data.name}")
    fig = charts.learning_curves(found, states, axis, best.number if best else None)
    widgets.show(st, fig, "curves", scales.axis(fig, "y", choice, metric))


def _pareto(data: SweepData, url: str) -> None:
    st.subheader("Pareto front")
    front = data.summary.pareto_front()
    if not front:
        st.info("No completed trial yet: the front appears with the first one.")
        return
    if len(data.directions) <= 3:
        study = state.study(url, data.name, data.fingerprint(), data)
        choice = widgets.scale_switch(st, f"scale-pareto-{data.name}")
        fig = state.derived(
            "pareto",
            url,
            data.name,
            data.fingerprint(),
            (),
            lambda: charts.pareto(study, data.metrics),
        )
        found = [scales.axis(fig, a, choice, m) for a, m in zip("xyz", data.metrics, strict=False)]
        widgets.show(st, fig, "pareto", *found)
    widgets.front_table(data, front)


def body(url: str, name: str) -> None:
    cfg = state.settings()
    data = state.sweep(url, name)
    uri = state.tracking_uri(cfg, data)
    _header(data, uri)
    _trials(data, uri)
    _progress(data, url)
    _curves(data, uri)
    if data.multi_objective:
        _pareto(data, url)
    analysis.render(data, url)


def main() -> None:
    cfg = state.settings()
    name = st.session_state.get("sweep")
    if not name:
        st.title("Sweep")
        st.info(f"No sweeps yet. Start one with `{state.START_HINT}`.")
        return
    running = state.sweep(cfg.storage, name).running
    state.live(lambda: body(cfg.storage, name), running, f"sweep-{name}")


main()
