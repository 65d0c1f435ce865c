"""The sweep's run as the sweep closes: best and Pareto marks, counts, description, end.

:func:`render_parent` computes what the sweep's run should show from the trials as storage
holds them (:mod:`.records`) and writes only what differs from what the run already shows:
tags whose value changed, points of ``best/<metric>`` (or ``pareto/size``) at steps the run
does not have yet, counts that changed, the status and end time if they differ. The end time
is the end of the last trial, not the moment of closing, so closing again (a finished sweep
run once more, or ``hyperfleet mlflow sync``) finds nothing to write and changes nothing.

The marks on trial runs (``hyperfleet.best``, ``hyperfleet.pareto``) move with the results:
set on the runs that earn them, removed from runs that no longer do.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.tracking.base import SweepView
from hyperfleet.platform.tracking.client import is_transient, log_batches
from hyperfleet.platform.tracking.outbox import Outbox
from hyperfleet.platform.tracking.records import (
    BEST_TAG,
    NOTE_TAG,
    PARETO_TAG,
    STATE_TAG,
    STOPPED_NOTE,
    STOPPED_TAG,
    Done,
    best,
    fmt,
    objectives,
    parent_series,
    pareto,
    state_counts,
    sweep_note,
)
from hyperfleet.spec.states import FINISHED, TrialState

logger = logging.getLogger(__name__)


class ParentRun(Protocol):
    """What the marks read of the sweep's MLflow tracker (:class:`~.tracker.SweepTracker`,
    which owns them and which they therefore do not import)."""

    @property
    def client(self) -> Any: ...
    @property
    def experiment_id(self) -> str | None: ...
    @property
    def parent_id(self) -> str: ...
    @property
    def sweep(self) -> str: ...
    @property
    def config(self) -> SweepConfig | None: ...
    @property
    def live(self) -> bool: ...
    @property
    def outbox(self) -> Outbox: ...
    def run_id_of(self, number: int, stored: str | None) -> str | None: ...


def completed(view: SweepView) -> list[Done]:
    """The sweep's COMPLETE trials that reported every objective."""
    metrics = [m for m, _ in objectives(view.config)]
    return [
        Done(t.number, [float(t.metrics[m]) for m in metrics], t.ended_at or 0.0)
        for t in view.trials
        if t.state == TrialState.COMPLETE and all(m in t.metrics for m in metrics)
    ]


def marked(view: SweepView) -> tuple[str, list[int]]:
    """The mark of this sweep (best or Pareto) and the trials that carry it."""
    modes = [mode for _, mode in objectives(view.config)]
    done = completed(view)
    if len(modes) == 1:
        top = best(done, modes)
        return BEST_TAG, [] if top is None else [top.number]
    return PARETO_TAG, sorted(pareto(done, modes))


def _mark_runs(tracker: ParentRun, tag: str, want: set[str]) -> None:
    """``tag = true`` on exactly the runs in ``want`` among the sweep's trial runs: the
    children of its own run (another sweep of the same name may share the experiment)."""
    client = tracker.client
    have = {
        str(r.info.run_id)
        for r in client.search_runs(
            [tracker.experiment_id],
            filter_string=f"tags.`mlflow.parentRunId` = '{tracker.parent_id}' "
            f"and tags.`hyperfleet.sweep` = '{tracker.sweep}' and tags.`{tag}` = 'true'",
            max_results=10000,
        )
    }
    for run_id in sorted(want - have):
        client.set_tag(run_id, tag, "true")
    for run_id in sorted(have - want):
        client.delete_tag(run_id, tag)


def _summary_line(
    view: SweepView, tag: str, numbers: list[int], runs: dict[int, str]
) -> tuple[str, dict[str, str]]:
    tags: dict[str, str] = {}
    if not numbers:
        return "No trial has completed yet.", tags
    metrics = [m for m, _ in objectives(view.config)]
    trials = {t.number: t for t in view.trials}
    if tag == BEST_TAG:
        n = numbers[0]
        value = trials[n].metrics[metrics[0]]
        tags["hyperfleet.best_trial"] = str(n)
        if n in runs:
            tags["hyperfleet.best_run_id"] = runs[n]
        return f"Best: trial {n}, {metrics[0]} = {fmt(float(value))}.", tags
    tags["hyperfleet.pareto_trials"] = ",".join(map(str, numbers))
    return f"Pareto front: trials {', '.join(map(str, numbers))}.", tags


def _new_points(client: Any, run_id: str, points: Iterable[Any]) -> list[Any]:
    """The points whose step the run's history of their key does not have yet."""
    from mlflow.entities import Metric

    by_key: dict[str, list[Any]] = {}
    for p in points:
        by_key.setdefault(p.key, []).append(p)
    out = []
    for key, group in by_key.items():
        steps = {m.step for m in client.get_metric_history(run_id, key)}
        out += [Metric(p.key, p.value, p.timestamp, p.step) for p in group if p.step not in steps]
    return out


def render_parent(tracker: ParentRun, run_id: str, status: str, view: SweepView) -> None:
    """Bring the sweep's run up to date with ``view`` (see the module docstring)."""
    from mlflow.entities import Metric

    client = tracker.client
    metrics = [m for m, _ in objectives(view.config)]
    modes = [mode for _, mode in objectives(view.config)]
    runs = {t.number: r for t in view.trials if (r := tracker.run_id_of(t.number, t.mlflow_run_id))}
    tag, numbers = marked(view)
    _mark_runs(tracker, tag, {runs[n] for n in numbers if n in runs})
    line, tags = _summary_line(view, tag, numbers, runs)
    counts = state_counts(t.state for t in view.trials)
    ended = [t.ended_at for t in view.trials if t.ended_at is not None]
    end_ms = int(max(ended) * 1000) if ended else int(time.time() * 1000)
    tags[STATE_TAG] = "INTERRUPTED" if view.interrupted else TrialState.COMPLETE
    tags[NOTE_TAG] = sweep_note(
        view.name, view.config, counts, line, view.interrupted, tracker.experiment_id
    )
    if view.stopped:  # a user ended it (``sweep stop``): the run ends KILLED
        tags[STATE_TAG] = STOPPED_TAG
        tags[NOTE_TAG] += f"\n\n{STOPPED_NOTE}"
    run = client.get_run(run_id)
    tags = {k: v for k, v in tags.items() if run.data.tags.get(k) != v}
    points = _new_points(client, run_id, parent_series(completed(view), metrics, modes))
    finished = sum(1 for t in view.trials if t.state in FINISHED)
    points += [
        Metric(k, v, end_ms, finished) for k, v in counts.items() if run.data.metrics.get(k) != v
    ]
    if tags or points:
        log_batches(client, run_id, tags=tags, metrics=points)
    if run.info.status != status or run.info.end_time != end_ms:
        client.set_terminated(run_id, status, end_time=end_ms)


class LiveBest:
    """The sweep run's ``best/<metric>`` curve (one objective) extended as trials complete,
    while the sweep runs. Points wait in a list and one outbox operation writes all those
    that came meanwhile (one history read, one ``log_batch``), so trials that end faster than
    MLflow takes single writes do not leave a queue of them behind."""

    def __init__(self, tracker: ParentRun) -> None:
        self.tracker = tracker
        self.last: tuple[int, float | None] = (0, None)  # completed trials, best so far
        self._points: list[tuple[str, float, int, int]] = []
        self._lock = threading.Lock()

    def seed(self, run_id: str) -> None:
        """Continue the curve where an earlier session left it."""
        config = self.tracker.config
        metrics = [] if config is None else [m for m, _ in objectives(config)]
        if len(metrics) != 1:
            return
        history = self.tracker.client.get_metric_history(run_id, f"best/{metrics[0]}")
        if history:
            last = max(history, key=lambda m: (m.step, m.timestamp))
            self.last = (int(last.step), float(last.value))

    def add(self, final: Mapping[str, float], now: int) -> None:
        """A trial completed with ``final`` at ``now`` (ms): one more point, written soon."""
        config = self.tracker.config
        if config is None:
            return
        (metric, mode), *more = objectives(config)
        if more or metric not in final or not self.tracker.live:
            return
        k, best = self.last
        value = float(final[metric])
        if best is None or (value > best if mode == "max" else value < best):
            best = value
        self.last = (k + 1, best)
        with self._lock:
            self._points.append((f"best/{metric}", best, now, k + 1))
            first = len(self._points) == 1
        if first:
            self.tracker.outbox.put("the best value so far", self._write)

    def _write(self) -> None:
        """Every waiting point whose step the run does not have (safe to run again)."""
        with self._lock:
            points = list(self._points)
        client, run_id = self.tracker.client, self.tracker.parent_id
        from mlflow.entities import Metric

        try:
            new = _new_points(client, run_id, [Metric(*p) for p in points])
            if new:
                client.log_batch(run_id, metrics=new)
        except Exception as exc:
            if not is_transient(exc):  # rejected: the outbox drops it, so does this list
                self._taken(len(points))
            raise  # a transient failure: the outbox runs this again, with what came meanwhile
        self._taken(len(points))

    def _taken(self, n: int) -> None:
        with self._lock:
            del self._points[:n]
            more = bool(self._points)
        if more:  # came while this ran
            self.tracker.outbox.put("the best value so far", self._write)


def end_stopped(uri: str, run_id: str) -> None:
    """The run of a sweep a user stopped while no worker ran a trial of it (none to close it):
    tagged STOPPED, its description saying so, ended KILLED, each written only if the run does
    not show it yet."""
    from hyperfleet.platform.tracking.client import open_client

    client = open_client(uri)
    run = client.get_run(run_id)
    note = run.data.tags.get(NOTE_TAG, "")
    tags = {STATE_TAG: STOPPED_TAG}
    if STOPPED_NOTE not in note:
        tags[NOTE_TAG] = f"{note}\n\n{STOPPED_NOTE}".strip()
    tags = {k: v for k, v in tags.items() if run.data.tags.get(k) != v}
    if tags:
        log_batches(client, run_id, tags=tags)
    if run.info.status != "KILLED":
        client.set_terminated(run_id, "KILLED")
