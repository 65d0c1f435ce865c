"""Controls and panels the Sweep and Compare pages share: the trials table's filters and
column formats, a trial's details (error and log tail), the curve pickers, the Pareto table and
the analysis charts (importance, parallel coordinates, slice, contour), and the scale switch
above each chart of values."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from hyperfleet.dashboards import charts, scales, state
from hyperfleet.dashboards.curves import Curve
from hyperfleet.dashboards.format import (
    duration,
    known_run,
    mlflow_ui,
    number,
    params_text,
    run_link,
)
from hyperfleet.dashboards.queries import SweepData
from hyperfleet.dashboards.sizes import sizes_text
from hyperfleet.dashboards.tables import METRIC, PARAM, STATE_ORDER, number_format
from hyperfleet.platform.storage.results import TrialSummary
from hyperfleet.spec.states import TrialState

LOG_LINES = 40
PRUNED_SHOWN = 10
"""Pruned trials whose curves are drawn by default (the latest ones)."""
SCALE_HELP = (
    f"auto: a log scale when every value is positive and they span more than "
    f"{scales.DECADES:g} decades; linear or log: that scale, whatever the values"
)


def scale_switch(container: Any, key: str) -> str:
    """A chart's scale switch for its value axis (:mod:`~hyperfleet.dashboards.scales`)."""
    picked = container.radio("scale", scales.CHOICES, horizontal=True, key=key, help=SCALE_HELP)
    return str(picked or scales.AUTO)


def show(container: Any, fig: Any, key: str, *found: scales.Scale) -> None:
    """``fig`` at the container's width, then the caption of each scale that needs one."""
    container.plotly_chart(fig, width="stretch", key=key)
    for scale in found:
        if scale.caption:
            container.caption(scale.caption)


def _bounds(data: SweepData, frame: pd.DataFrame, name: str) -> tuple[float, float] | None:
    spec = data.space.get(name, {})
    column = PARAM + name
    if spec.get("type") == "categorical" or column not in frame:  # no trial has a value yet
        return None
    values = pd.to_numeric(frame[column], errors="coerce").dropna()
    if values.empty:
        return None
    low = min(float(spec.get("low", values.min())), float(values.min()))
    high = max(float(spec.get("high", values.max())), float(values.max()))
    return (low, high) if high > low else None


def trial_filters(
    data: SweepData, frame: pd.DataFrame
) -> tuple[list[str], dict[str, tuple[float, float]], dict[str, list[Any]]]:
    """States, numeric ranges and categorical choices picked in the "Filter" expander."""
    present = [s for s in STATE_ORDER if s in set(frame["state"])]
    present += sorted(set(frame["state"]) - set(present))
    ranges: dict[str, tuple[float, float]] = {}
    choices: dict[str, list[Any]] = {}
    with st.expander("Filter by state and parameter range"):
        states = st.multiselect("states", present, default=present, key=f"states-{data.name}")
        for name, spec in data.space.items():
            key = f"range-{data.name}-{name}"
            if spec.get("type") == "categorical":
                options = list(spec.get("choices", []))
                choices[name] = st.multiselect(name, options, default=options, key=key)
                continue
            bounds = _bounds(data, frame, name)
            if bounds is None:
                continue
            if spec.get("log") and bounds[0] > 0:
                lo, hi = math.log10(bounds[0]), math.log10(bounds[1])
                picked = st.slider(
                    f"{name} (log10)",
                    lo,
                    hi,
                    (lo, hi),
                    step=(hi - lo) / 100,
                    format="10^%.2f",
                    key=key,
                )
                ranges[name] = (10 ** picked[0] * (1 - 1e-9), 10 ** picked[1] * (1 + 1e-9))
            else:
                ranges[name] = st.slider(name, bounds[0], bounds[1], bounds, key=key)
    return states, ranges, choices


def trial_columns(frame: pd.DataFrame, data: SweepData) -> dict[str, Any]:
    """Column formats: three significant digits for values and params, links for MLflow;
    metric and parameter columns keep their prefix (``metric.lr``, ``param.lr``) on screen."""
    config: dict[str, Any] = {
        "trial": st.column_config.NumberColumn(format="%d", width="small"),
        "duration s": st.column_config.NumberColumn(format="%.1f"),
        "mlflow": st.column_config.LinkColumn(display_text="open run"),
        "error": st.column_config.TextColumn(width="large"),
    }
    for col in frame.columns:
        if col.startswith(METRIC):
            config[col] = st.column_config.NumberColumn(format=number_format(frame[col]))
        elif col.startswith(PARAM) and pd.api.types.is_numeric_dtype(frame[col]):
            integral = pd.api.types.is_integer_dtype(frame[col])
            fmt = "%d" if integral else number_format(frame[col])
            config[col] = st.column_config.NumberColumn(format=fmt)
        elif col.startswith(PARAM):
            config[col] = st.column_config.TextColumn()
    return config


def _label(t: TrialSummary) -> str:
    value = f" · {', '.join(number(v) for v in t.values)}" if t.values else ""
    return f"trial {t.number} · {t.state}{value}"


def _default_trial(data: SweepData) -> int:
    best = data.best()
    if best is not None:
        return best.number
    failed = [t.number for t in data.summary.trials if t.state == TrialState.FAIL]
    return failed[0] if failed else data.summary.trials[-1].number


def log_tail(path: str | None, lines: int = LOG_LINES) -> str | None:
    """The last ``lines`` lines of a trial's log, or None when it is not on this host."""
    if not path or not Path(path).is_file():
        return None
    with open(path, "rb") as f:
        f.seek(0, 2)
        f.seek(max(0, f.tell() - 64 * 1024))
        text = f.read().decode(errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def _last_report(t: TrialSummary) -> str:
    if t.last_step is None:
        return "none (it reported nothing)"
    return f"{params_text(t.metrics) or '-'} at step {t.last_step}"


def system_frame(found: dict[str, Curve]) -> pd.DataFrame:
    """One row per system metric: its mean, peak and last sample, and how many there were."""
    return pd.DataFrame(
        [
            {
                "metric": key,
                "mean": number(sum(c.values) / len(c.values)),
                "peak": number(max(c.values)),
                "last": number(c.values[-1]),
                "samples": len(c.values),
            }
            for key, c in found.items()
            if len(c)
        ]
    )


def _system_metrics(found: dict[str, Curve]) -> None:
    if not found:
        st.caption("system metrics: none recorded in MLflow for this trial")
        return
    with st.expander(f"system metrics ({len(found)}, from MLflow)"):
        st.table(system_frame(found).set_index("metric"))


def trial_details(data: SweepData, uri: str) -> None:
    """A trial's params, metrics, where it ran, its sizes (an elastic trial's), its MLflow run,
    error and log tail."""
    trials = {t.number: t for t in data.summary.trials}
    numbers = list(trials)
    pick = st.selectbox(
        "Trial details",
        numbers,
        index=numbers.index(_default_trial(data)),
        format_func=lambda n: _label(trials[n]),
        key=f"detail-{data.name}",
    )
    t, record = trials[pick], data.records.get(pick)
    left, right = st.columns(2)
    left.markdown(f"**params** {params_text(t.params)}")
    left.markdown(f"**last report** {_last_report(t)}")
    right.markdown(
        f"**state** {t.state} · **duration** {duration(t.duration_s)} · "
        f"**attempts** {record.attempts if record else '-'}"
    )
    size = sizes_text(record, data.config)
    if size:
        right.markdown(f"**size** {size}")
    link = run_link(mlflow_ui(uri), data.experiment_id, record.mlflow_run_id if record else None)
    if link:
        right.markdown(f"**MLflow** [{record.mlflow_run_id}]({link})" if record else "")
    run = known_run(record.mlflow_run_id) if record else None
    if run:
        _system_metrics(state.system_metrics(uri, run))
    if t.error:
        st.markdown("**error**")
        st.code(t.error, language=None)
    path = (
        state.local(state.settings(), data, record.log_path) if record and record.log_path else None
    )
    tail = log_tail(path)
    if tail is not None:
        with st.expander(f"log tail ({path})", expanded=bool(t.error)):
            st.code(tail or "(empty)", language=None)
    elif path:
        st.caption(f"log: {path} (not on this host)")


def default_trials(data: SweepData, count: int) -> list[int]:
    """The ``count`` best COMPLETE trials (the first objective), the latest ``PRUNED_SHOWN``
    PRUNED ones (what pruning cut short is what a curve shows best) and every running one."""
    done = [t for t in data.summary.trials if t.state == TrialState.COMPLETE and t.values]
    sign = -1.0 if data.directions[0] == "maximize" else 1.0
    done.sort(key=lambda t: sign * t.values[0])  # type: ignore[index]
    pruned = [t.number for t in data.summary.trials if t.state == TrialState.PRUNED]
    running = [t.number for t in data.summary.trials if t.state == TrialState.RUNNING]
    picked = [t.number for t in done[:count]] + pruned[-PRUNED_SHOWN:] + running
    return picked or [t.number for t in data.summary.trials[:count]]


def curve_controls(
    data: SweepData, key: str, default_count: int, max_trials: int | None = None
) -> tuple[str, str, list[int]]:
    """The metric, the x axis and the trials of a learning-curve chart."""
    trials = {t.number: t for t in data.summary.trials}
    a, b, c = st.columns([1, 1, 3])
    metric = a.selectbox("metric", data.reported_metrics(), key=f"{key}-metric-{data.name}")
    axes: list[str] = list(charts.X_LABELS)
    axis = b.selectbox(
        "x axis",
        axes,
        format_func=lambda a: charts.X_LABELS[a],
        key=f"{key}-axis-{data.name}",
    )
    chosen = c.multiselect(
        "trials",
        list(trials),
        default=default_trials(data, default_count)[: max_trials or None],
        format_func=lambda n: _label(trials[n]),
        max_selections=max_trials,
        key=f"{key}-trials-{data.name}",
    )
    return str(metric), str(axis), list(chosen)


def front_table(data: SweepData, front: list[TrialSummary]) -> None:
    rows = [
        {
            "trial": t.number,
            **{METRIC + m: number(v) for m, v in zip(data.metrics, t.values or [], strict=False)},
            "params": params_text(t.params),
        }
        for t in sorted(front, key=lambda t: t.values or [])
    ]
    st.table(pd.DataFrame(rows).set_index("trial"))
