"""MLflow tracking: one experiment per sweep, a parent run for the sweep, a child run per trial.

Everything goes through an explicit ``MlflowClient`` and run ids (never the fluent API's global
active run), so the controller and each trial's rank 0 write to the runs they were given: the
controller creates the runs and ends them with the trial's state; rank 0 of the trial logs its
metrics. Metrics are buffered and written with one ``log_batch`` per flush, not one round trip
per value.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

logger = logging.getLogger(__name__)

STATUS = {"COMPLETE": "FINISHED", "FAIL": "FAILED", "PRUNED": "KILLED", "WAITING": "KILLED"}
_MAX_BATCH = 1000  # MLflow's limit of metrics per log_batch


def _client(uri: str) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        out[prefix] = str(value)[:6000]


def flatten_params(params: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    _flatten("", params, out)
    return out


class Tracker(Protocol):
    """The controller's side of tracking: the sweep's parent run and a child run per trial."""

    experiment_id: str | None

    def start_parent(self, sweep: str, run_id: str | None, params: Mapping[str, Any]) -> str: ...

    def start_child(
        self,
        sweep: str,
        parent_id: str,
        number: int,
        params: Mapping[str, Any],
        tags: Mapping[str, str] | None = None,
    ) -> str: ...

    def resume_child(self, run_id: str) -> None: ...

    def end_child(
        self, run_id: str, state: str, final: Mapping[str, float] | None = None, error: str = ""
    ) -> None: ...

    def end_parent(self, run_id: str, status: str, best: Mapping[str, Any] | None) -> None: ...


class NullTracker:
    """Tracks nothing (simulated sweeps, tests of the controller): run ids are made up and the
    calls are kept in ``calls`` for assertions."""

    experiment_id: str | None = None
    uri = None

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self._runs = 0

    def _run(self, what: str, detail: Any) -> str:
        self._runs += 1
        self.calls.append((what, detail))
        return f"null-{self._runs}"

    def start_parent(self, sweep: str, run_id: str | None, params: Mapping[str, Any]) -> str:
        return run_id or self._run("start_parent", sweep)

    def start_child(
        self,
        sweep: str,
        parent_id: str,
        number: int,
        params: Mapping[str, Any],
        tags: Mapping[str, str] | None = None,
    ) -> str:
        return self._run("start_child", number)

    def resume_child(self, run_id: str) -> None:
        self.calls.append(("resume_child", run_id))

    def end_child(
        self, run_id: str, state: str, final: Mapping[str, float] | None = None, error: str = ""
    ) -> None:
        self.calls.append(("end_child", (run_id, state)))

    def end_parent(self, run_id: str, status: str, best: Mapping[str, Any] | None) -> None:
        self.calls.append(("end_parent", (run_id, status)))


class SweepTracker:
    """The controller's side: experiment, parent run, child runs and their end states."""

    def __init__(self, uri: str, experiment: str, artifact_dir: Path | None = None) -> None:
        self.uri = uri
        self.client = _client(uri)
        exp = self.client.get_experiment_by_name(experiment)
        if exp is None:
            location = artifact_dir.resolve().as_uri() if artifact_dir else None
            self.experiment_id = self.client.create_experiment(
                experiment, artifact_location=location
            )
        else:
            self.experiment_id = exp.experiment_id

    def start_parent(self, sweep: str, run_id: str | None, params: Mapping[str, Any]) -> str:
        from mlflow.entities import Param

        if run_id:
            self.client.update_run(run_id, status="RUNNING")
            return run_id
        run = self.client.create_run(
            self.experiment_id, run_name=sweep, tags={"hyperfleet.sweep": sweep}
        )
        flat = flatten_params(params)
        items = [Param(k, v) for k, v in flat.items()]
        for i in range(0, len(items), 100):
            self.client.log_batch(run.info.run_id, params=items[i : i + 100])
        return str(run.info.run_id)

    def start_child(
        self,
        sweep: str,
        parent_id: str,
        number: int,
        params: Mapping[str, Any],
        tags: Mapping[str, str] | None = None,
    ) -> str:
        from mlflow.entities import Param

        tags = {
            **(tags or {}),
            "mlflow.parentRunId": parent_id,
            "hyperfleet.sweep": sweep,
            "hyperfleet.trial": str(number),
        }
        run = self.client.create_run(self.experiment_id, run_name=f"trial-{number}", tags=tags)
        items = [Param(k, v) for k, v in flatten_params(params).items()]
        for i in range(0, len(items), 100):
            self.client.log_batch(run.info.run_id, params=items[i : i + 100])
        return str(run.info.run_id)

    def resume_child(self, run_id: str) -> None:
        self.client.update_run(run_id, status="RUNNING")

    def end_child(
        self, run_id: str, state: str, final: Mapping[str, float] | None = None, error: str = ""
    ) -> None:
        from mlflow.entities import Metric, RunTag

        now = int(time.time() * 1000)
        metrics = [Metric(f"final/{k}", float(v), now, 0) for k, v in (final or {}).items()]
        tags = [RunTag("hyperfleet.state", state)]
        if error:
            tags.append(RunTag("hyperfleet.error", error[-4000:]))
        self.client.log_batch(run_id, metrics=metrics, tags=tags)
        self.client.set_terminated(run_id, status=STATUS.get(state, "FAILED"))

    def end_parent(self, run_id: str, status: str, best: Mapping[str, Any] | None) -> None:
        from mlflow.entities import Metric, RunTag

        now = int(time.time() * 1000)
        metrics, tags = [], []
        if best:
            metrics = [Metric("best/value", float(best["value"]), now, 0)]
            tags = [RunTag("hyperfleet.best_trial", str(best["number"]))]
        self.client.log_batch(run_id, metrics=metrics, tags=tags)
        self.client.set_terminated(run_id, status=status)


class MetricSink:
    """Trial side: buffers metrics and writes them to one run with ``log_batch``.

    ``log_metrics`` only appends ``(key, value, timestamp, step)`` to a list: no MLflow call
    and no MLflow import on the training thread. A background thread opens the client (so
    importing MLflow overlaps the trial's start-up), flushes every ``flush_every_s`` seconds,
    and ``close`` flushes what is left. A failed flush keeps the buffer and retries at the
    next one, so a short outage of the tracking store loses nothing.
    """

    def __init__(self, uri: str, run_id: str, flush_every_s: float = 2.0) -> None:
        self.uri = uri
        self.run_id = run_id
        self._client: Any = None
        self._client_lock = threading.Lock()
        self._buf: list[tuple[str, float, int, int]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._every = flush_every_s
        self._thread = threading.Thread(target=self._loop, name="metric-sink", daemon=True)
        self._thread.start()

    @property
    def client(self) -> Any:
        with self._client_lock:
            if self._client is None:
                self._client = _client(self.uri)
            return self._client

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        now = int(time.time() * 1000)
        items = [(k, float(v), now, step) for k, v in metrics.items() if math.isfinite(float(v))]
        with self._lock:
            self._buf.extend(items)

    def logged_through(self, key: str) -> int:
        """The last step of ``key`` already in the run (-1 if none)."""
        history = self.client.get_metric_history(self.run_id, key)
        return max((m.step for m in history), default=-1)

    def flush(self) -> None:
        with self._lock:
            pending, self._buf = self._buf, []
        if not pending:
            return
        try:
            from mlflow.entities import Metric

            metrics = [Metric(k, v, ts, step) for k, v, ts, step in pending]
            for i in range(0, len(metrics), _MAX_BATCH):
                self.client.log_batch(self.run_id, metrics=metrics[i : i + _MAX_BATCH])
        except Exception:
            logger.warning("MLflow log_batch failed; will retry", exc_info=True)
            with self._lock:
                self._buf = pending + self._buf

    def _loop(self) -> None:
        try:
            self.client  # noqa: B018 - open it (and import MLflow) off the training thread
        except Exception:
            logger.warning("cannot open the MLflow tracking store yet", exc_info=True)
        while not self._stop.wait(self._every):
            self.flush()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.flush()
