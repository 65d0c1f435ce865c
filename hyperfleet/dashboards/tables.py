"""The dashboard's tables as pandas frames: the trials of a sweep, the sweeps, a parameter diff.

Numbers stay numbers in the frames (the table sorts and filters them as numbers); how they
print is given per column by :func:`number_format`: three significant digits, scientific
below 1e-3, so 1.7e-4 and 2.2e-4 never both read ``0.0002``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from hyperfleet.dashboards.format import error_summary, mlflow_ui, number, run_link, timestamp
from hyperfleet.dashboards.queries import SweepData, SweepOverview
from hyperfleet.spec.states import TrialState

BEST = "★"
PARAM, METRIC = "param.", "metric."
"""Prefixes of the trials table's parameter and metric columns: a parameter and a metric of
one name (``param.lr``, ``metric.lr``), or a metric named like a fixed column (``state``,
``steps``, ``error``, ...), never share a column."""
STATE_ORDER: list[str] = [
    TrialState.RUNNING, TrialState.PAUSED, TrialState.WAITING,
    TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL,
]  # fmt: skip


def number_format(values: Iterable[Any]) -> str:
    """A printf format for a column: ``%.3g`` when every value sits in ``[1e-3, 1e5)`` (or is
    0), else ``%.2e``."""
    numbers = [abs(float(v)) for v in values if isinstance(v, (int, float)) and v == v and v]
    if all(1e-3 <= v < 1e5 for v in numbers):
        return "%.3g"
    return "%.2e"


def _devices(data: SweepData) -> dict[int, str]:
    """Each trial's host and devices of its latest launch, e.g. ``gpu7: cuda:0, cuda:1``."""
    out = {}
    for lease in data.leases:  # ordered by id: later launches overwrite earlier ones
        out[lease.trial] = f"{lease.host}: {', '.join(lease.devices)}"
    return out


def _numeric(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok else None


def trials_frame(data: SweepData, tracking_uri: str | None) -> pd.DataFrame:
    """One row per trial: state, the objectives and then the other metrics of its last report
    (``metric.NAME``), params (``param.NAME``), progress, where it ran, its error's one-line
    summary (no column when no trial has one) and its MLflow run link. The best trial is
    marked ``★`` in the column ``best``; in a multi-objective sweep, the Pareto front in
    ``front``."""
    best = data.best()
    front = {t.number for t in data.summary.pareto_front()} if data.multi_objective else set()
    ui = mlflow_ui(tracking_uri)
    devices = _devices(data)
    mark = "front" if data.multi_objective else "best"
    rows = []
    for t in data.summary.trials:
        record = data.records.get(t.number)
        marked = (best is not None and t.number == best.number) or t.number in front
        row: dict[str, Any] = {"trial": t.number, mark: BEST if marked else "", "state": t.state}
        for i, metric in enumerate(data.metrics):
            value = t.values[i] if t.values else t.metrics.get(metric)
            row[METRIC + metric] = _numeric(value)
        for metric, value in t.metrics.items():
            if metric not in data.metrics:
                row[METRIC + metric] = _numeric(value)
        row.update({PARAM + k: v for k, v in t.params.items()})
        row["steps"] = t.last_step
        row["pruned at"] = str(t.last_step) if t.state == TrialState.PRUNED else ""
        row["duration s"] = t.duration_s
        row["error"] = error_summary(t.error)
        row["mlflow"] = run_link(ui, data.experiment_id, record.mlflow_run_id if record else None)
        row["host / devices"] = devices.get(t.number, record.host if record else None)
        row["started"] = timestamp(record.started_at) if record else "-"
        rows.append(row)
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    if not frame["error"].astype(bool).any():  # no trial failed: a wide, empty column
        frame = frame.drop(columns="error")
    return frame.astype({"steps": "Int64"})


def filter_trials(
    frame: pd.DataFrame,
    states: Sequence[str],
    ranges: Mapping[str, tuple[float, float]],
    choices: Mapping[str, Sequence[Any]],
) -> pd.DataFrame:
    """The rows whose state is in ``states``, numeric params inside ``ranges`` (inclusive)
    and categorical params in ``choices``; a trial without a param is kept."""
    keep = frame["state"].isin(list(states))
    for name, (low, high) in ranges.items():
        col = frame.get(PARAM + name)
        if col is not None:
            numeric = pd.to_numeric(col, errors="coerce")
            keep &= numeric.isna() | numeric.between(low, high)
    for name, allowed in choices.items():
        col = frame.get(PARAM + name)
        if col is not None:
            keep &= col.isna() | col.isin(list(allowed))
    return frame[keep]


def sweeps_frame(rows: Sequence[SweepOverview]) -> pd.DataFrame:
    """The Sweeps page's table, newest first."""
    out = []
    for r in reversed(rows):
        progress = f"{r.done} / {r.budget}" if r.budget else str(r.done)
        out.append(
            {
                "sweep": r.name,
                "objective": r.objective,
                "scheduler": r.scheduler,
                "state": r.status,
                "progress": progress,
                "best": number(r.best)
                if r.best is not None
                else (f"{r.pareto} on the front" if r.pareto is not None else "-"),
                "running": r.running,
                "started": timestamp(r.created_at),
                "devices in use": ", ".join(r.devices) or "-",
            }
        )
    return pd.DataFrame(out)


def param_diff(params: dict[int, dict[str, Any]]) -> pd.DataFrame:
    """Parameters (rows) of several trials (columns ``trial N``) where they differ; a
    parameter every trial sets to the same value is left out."""
    names = list(dict.fromkeys(k for p in params.values() for k in p))
    rows = {}
    for name in names:
        values = [p.get(name) for p in params.values()]
        if len({repr(v) for v in values}) > 1:
            rows[name] = values
    frame = pd.DataFrame.from_dict(
        rows, orient="index", columns=[f"trial {n}" for n in params], dtype=object
    )
    frame.index.name = "param"
    return frame
