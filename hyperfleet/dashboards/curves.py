"""Learning curves: every reported metric of a trial by step and wall time, read from MLflow.

Each report of a trial is logged as a metric of its MLflow run (``step`` and a millisecond
``timestamp`` per point); the platform's own tables keep only the last report. The curves are
therefore read from the sweep's MLflow tracking store, without writing to it:

* a database store (``sqlite:///…/mlflow.db``, ``postgresql://…``) is read with one SQL query
  per metric over MLflow's ``metrics`` table (indexed by run, key and step) through a
  read-only engine — opening it through ``MlflowClient`` would create a missing SQLite file
  and run MLflow's migrations on an empty one;
* a tracking server (``http(s)://…``) through ``MlflowClient.get_metric_history``, one
  request per run (the REST API has no batch read), which only reads.

A curve of thousands of points costs the browser more than it shows, so
:func:`downsample` keeps at most ``MAX_POINTS`` per curve: the first and last points and, in
each of ``MAX_POINTS // 2`` equal buckets between, the lowest and highest one, in step order.
Unlike taking every k-th point, it keeps every spike and every dip, which is what a curve is
read for.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import sqlalchemy as sa

from hyperfleet.errors import StorageError
from hyperfleet.platform.credentials import keep, masked, reveal
from hyperfleet.platform.storage.engine import create_engine, parse_url, sqlite_path

MAX_POINTS = 400
"""Points per curve sent to the browser (see :func:`downsample`)."""
_CHUNK = 500  # run ids per IN (...) list


@dataclass(frozen=True)
class Curve:
    """One metric of one trial: parallel lists, step ascending."""

    trial: int
    metric: str
    steps: list[int]
    values: list[float]
    times: list[float]  # Unix seconds of each report

    def __len__(self) -> int:
        return len(self.steps)


class CurveSource(Protocol):
    """Where learning curves come from (see the module docstring)."""

    description: str

    def histories(self, runs: Mapping[int, str], metric: str) -> dict[int, Curve]:
        """``metric``'s curve of each trial in ``runs`` (trial number -> MLflow run id);
        trials without a point are left out."""
        ...

    def system(self, run: str) -> dict[str, Curve]:
        """The run's system metrics (MLflow's ``system/...`` keys, sampled while the trial
        ran), by key without the prefix; empty when none were recorded."""
        ...

    def close(self) -> None: ...


SYSTEM_PREFIX = "system/"


def _curve(trial: int, metric: str, points: Sequence[tuple[int, int, float]]) -> Curve:
    """A curve from ``(step, timestamp_ms, value)`` points; of repeated steps the last logged
    wins (a resumed trial may log a step again)."""
    by_step: dict[int, tuple[int, float]] = {}
    for step, stamp, value in sorted(points):  # by step, then time: the last logged wins
        by_step[int(step)] = (int(stamp), float(value))
    steps = sorted(by_step)
    return Curve(
        trial=trial,
        metric=metric,
        steps=steps,
        values=[by_step[s][1] for s in steps],
        times=[by_step[s][0] / 1000.0 for s in steps],
    )


class SqlCurves:
    """MLflow's ``metrics`` table through a read-only engine."""

    def __init__(self, tracking_uri: str) -> None:
        path = sqlite_path(tracking_uri)
        if path is not None and not path.is_file():
            raise StorageError(
                f"tracking: no MLflow database at {path}; give --tracking-uri (nothing was created)"
            )
        tracking_uri = keep(tracking_uri)  # without its password, but for the engine
        self.description = f"MLflow store {tracking_uri}"
        self.engine = create_engine(reveal(tracking_uri), readonly=True)
        try:
            with self.engine.connect() as conn:
                if not sa.inspect(conn).has_table("metrics"):
                    raise StorageError(f"tracking: {tracking_uri} holds no MLflow runs")
        except sa.exc.OperationalError as exc:
            self.engine.dispose()
            raise StorageError(f"tracking: cannot open {tracking_uri!r}: {exc.orig}") from None
        except StorageError:
            self.engine.dispose()
            raise

    def histories(self, runs: Mapping[int, str], metric: str) -> dict[int, Curve]:
        trial_of = {run: trial for trial, run in runs.items() if run}
        points: dict[str, list[tuple[int, int, float]]] = {}
        ids = list(trial_of)
        query = sa.text(
            "SELECT run_uuid, step, timestamp, value FROM metrics "
            "WHERE key = :key AND is_nan = :nan AND run_uuid IN :ids"
        ).bindparams(sa.bindparam("ids", expanding=True))
        with self.engine.connect() as conn:
            for start in range(0, len(ids), _CHUNK):
                chunk = ids[start : start + _CHUNK]
                rows = conn.execute(query, {"key": metric, "nan": False, "ids": chunk}).all()
                for run, step, stamp, value in rows:
                    points.setdefault(run, []).append((step, stamp, value))
        return {trial_of[run]: _curve(trial_of[run], metric, p) for run, p in points.items()}

    def system(self, run: str) -> dict[str, Curve]:
        query = sa.text(
            "SELECT key, step, timestamp, value FROM metrics "
            "WHERE run_uuid = :run AND key LIKE :prefix AND is_nan = :nan"
        )
        points: dict[str, list[tuple[int, int, float]]] = {}
        with self.engine.connect() as conn:
            rows = conn.execute(query, {"run": run, "prefix": f"{SYSTEM_PREFIX}%", "nan": False})
            for key, step, stamp, value in rows:
                points.setdefault(key.removeprefix(SYSTEM_PREFIX), []).append((step, stamp, value))
        return {key: _curve(0, key, p) for key, p in sorted(points.items())}

    def close(self) -> None:
        self.engine.dispose()


REST_RETRIES, REST_TIMEOUT_S = "1", "10"
"""MLflow's HTTP client retries 7 times with backoff by default (minutes for a server that is
down); a page waiting on it would hang, so the dashboard's process asks for less."""


class RestCurves:
    """An MLflow tracking server, through ``MlflowClient`` (reads only)."""

    def __init__(self, tracking_uri: str) -> None:
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", REST_RETRIES)
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", REST_TIMEOUT_S)
        from mlflow.tracking import MlflowClient

        self.description = f"MLflow server {masked(tracking_uri)}"
        self.client: Any = MlflowClient(tracking_uri=reveal(tracking_uri))

    def histories(self, runs: Mapping[int, str], metric: str) -> dict[int, Curve]:
        from mlflow.exceptions import MlflowException

        out = {}
        for trial, run in runs.items():
            if not run:
                continue
            try:
                history = self.client.get_metric_history(run, metric)
            except MlflowException as exc:
                first = str(exc.message).splitlines()[0][:200]
                raise StorageError(f"tracking: {self.description}: {first}") from None
            if history:
                points = [(m.step, m.timestamp, m.value) for m in history]
                out[trial] = _curve(trial, metric, points)
        return out

    def system(self, run: str) -> dict[str, Curve]:
        from mlflow.exceptions import MlflowException

        try:
            keys = [k for k in self.client.get_run(run).data.metrics if k.startswith(SYSTEM_PREFIX)]
            histories = {k: self.client.get_metric_history(run, k) for k in sorted(keys)}
        except MlflowException as exc:
            first = str(exc.message).splitlines()[0][:200]
            raise StorageError(f"tracking: {self.description}: {first}") from None
        return {
            k.removeprefix(SYSTEM_PREFIX): _curve(0, k, [(m.step, m.timestamp, m.value) for m in h])
            for k, h in histories.items()
        }

    def close(self) -> None:
        pass


def open_curves(tracking_uri: str) -> CurveSource:
    """The curve source of ``tracking_uri``; ``StorageError`` (one line) when it cannot be
    read. Nothing is created, whatever the URI."""
    if tracking_uri.startswith(("http://", "https://")):
        return RestCurves(tracking_uri)
    if tracking_uri.startswith("file:") or "://" not in tracking_uri:
        raise StorageError(
            f"tracking: {tracking_uri!r} is a file store; the dashboard reads curves from a "
            f"database store or a tracking server"
        )
    parse_url(tracking_uri)
    return SqlCurves(tracking_uri)


def downsample(curve: Curve, max_points: int = MAX_POINTS) -> Curve:
    """At most ``max_points`` points of ``curve`` that keep its extremes (module docstring)."""
    n = len(curve)
    if n <= max_points:
        return curve
    buckets = max(1, (max_points - 2) // 2)
    keep = {0, n - 1}
    inner = range(1, n - 1)
    size = len(inner) / buckets
    for b in range(buckets):
        lo, hi = 1 + int(b * size), 1 + int((b + 1) * size)
        if lo >= hi:
            continue
        span = range(lo, min(hi, n - 1))
        keep.add(min(span, key=lambda i: curve.values[i]))
        keep.add(max(span, key=lambda i: curve.values[i]))
    idx = sorted(keep)
    return Curve(
        trial=curve.trial,
        metric=curve.metric,
        steps=[curve.steps[i] for i in idx],
        values=[curve.values[i] for i in idx],
        times=[curve.times[i] for i in idx],
    )
