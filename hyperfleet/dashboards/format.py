"""How the dashboard writes numbers, durations, errors and MLflow links.

Hyperparameters span orders of magnitude: a fixed number of decimals prints both 1.7e-4 and
2.2e-4 as ``0.0002``. :func:`number` keeps three *significant* digits instead and switches to
scientific notation outside ``[1e-3, 1e5)``, so every value stays distinguishable at a glance.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

from hyperfleet.platform.urls import MLFLOW_UI_PORT, mlflow_run_link

SIGNIFICANT = 3
"""Significant digits of every number the dashboard prints."""

_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Warning)\b.*")


def number(value: Any, digits: int = SIGNIFICANT) -> str:
    """``value`` with ``digits`` significant digits: ``1.73e-04``, ``0.0123``, ``42``, ``1.2e+06``.

    Integers print in full, booleans and strings as they are, ``None`` as ``-``.
    """
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if value == 0:
        return "0"
    if 1e-3 <= abs(value) < 1e5:
        return f"{value:.{digits}g}"
    return f"{value:.{digits - 1}e}"


def params_text(params: dict[str, Any]) -> str:
    """``lr=1.73e-04, width=45``: a parameter set on one line."""
    return ", ".join(f"{k}={number(v)}" for k, v in params.items())


def duration(seconds: float | None) -> str:
    """``42.1 s``, ``3 min 05 s``, ``2 h 07 min``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def timestamp(seconds: float | None) -> str:
    """A Unix time as local ``YYYY-MM-DD HH:MM:SS``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    return dt.datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M:%S")


def error_summary(error: str | None, width: int = 120) -> str:
    """The one line of a stored error that says what went wrong.

    Errors are stored as ``exit code N`` followed by the log's tail; the exception line of the
    last traceback (``RuntimeError: diverged ...``) is the useful part. Without one, the last
    non-empty line.
    """
    if not error:
        return ""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    found = [line for line in lines if _EXCEPTION_LINE.match(line)]
    text = found[-1] if found else lines[-1]
    return text if len(text) <= width else text[: width - 1] + "…"


def mlflow_ui(tracking_uri: str | None) -> str | None:
    """The MLflow web UI that shows ``tracking_uri``'s runs.

    An ``http(s)`` tracking URI is a tracking server, which serves the UI itself. A database
    or file store has no UI until one is started with ``mlflow ui --backend-store-uri URI``,
    which listens on ``http://127.0.0.1:5000`` by default: links point there.
    """
    if not tracking_uri:
        return None
    if tracking_uri.startswith(("http://", "https://")):
        return tracking_uri.rstrip("/")
    return f"http://127.0.0.1:{MLFLOW_UI_PORT}"


def known_run(run_id: str | None) -> str | None:
    """``run_id``, or None while it is a placeholder (``pending:N``: a trial launches before
    its MLflow run is created, and storage learns the real id a moment later)."""
    return None if not run_id or run_id.startswith("pending:") else run_id


def run_link(ui: str | None, experiment_id: str | None, run_id: str | None) -> str | None:
    """``<ui>/#/experiments/<id>/runs/<run>?workflowType=machine_learning`` (the run's page
    in MLflow's model-training view), or None when any part is unknown."""
    run_id = known_run(run_id)
    if not (ui and experiment_id and run_id):
        return None
    return mlflow_run_link(ui, str(experiment_id), run_id)
