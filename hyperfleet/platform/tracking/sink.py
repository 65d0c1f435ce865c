"""Trial side: one run's metrics and tags, batched off the training thread, spooled, shipped.

``ctx.report`` reaches :meth:`MetricSink.log_metrics` on rank 0, which appends the report's
``(key, value, timestamp, step)`` points to the trial's :class:`~.spool.Spool` before it
returns (one small write to the page cache, no fsync: tens of microseconds): a copy of the
trial killed right after a report has its points on disk, where the next copy, the controller
or ``hyperfleet mlflow sync`` ships them. No MLflow call and no MLflow import on the training
thread, so a slow or absent tracking server never slows a step.

A background thread wakes every ``flush_every_s`` seconds and appends what is buffered (tags,
points whose write failed) to the spool. A trial under a controller stops there
(``ship_every_s=None``, :class:`~hyperfleet.platform.recorder.RankZeroRecorder`'s sink): its
controller ships the running trials' spools every few seconds
(:meth:`~.tracker.SweepTracker.ship_running`), so a trial process never imports MLflow, whose
import costs it about 1.5 s of CPU. A sink given ``ship_every_s`` ships itself every that many
seconds (the first time ``ship_every_s`` after the start), everything unsent with
``log_batch`` (:func:`~.client.log_points`), a few large calls rather than many small ones
(each call costs an HTTP request or a database transaction of its own). While the server is
unreachable the records stay in the spool and the thread retries with a growing pause (up to
``max_backoff_s``); when the server is back they go out in order, each once, before anything
newer. :meth:`close` makes one last attempt and leaves whatever is still unsent in the spool,
where the controller (at the trial's end, once MLflow answers) or ``hyperfleet mlflow sync``
picks it up: the trial never waits for the server.

A run the controller could not create during an outage has a ``pending:N`` id: the sink
spools everything and looks for the real id (the spool's ``run_id`` file, which the
controller writes once it has created the run) before each attempt.
"""

from __future__ import annotations

import logging
import math
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hyperfleet.errors import first_line
from hyperfleet.platform.tracking.client import is_transient, open_client, retry_s
from hyperfleet.platform.tracking.spool import PENDING, Point, Spool, is_pending
from hyperfleet.platform.tracking.system import SystemSampler

logger = logging.getLogger(__name__)


class MetricSink:
    """One run's records from a trial's rank 0 (see the module docstring).

    ``spool_dir`` is the trial's ``mlflow/`` folder (a temporary one if None);
    ``ship_every_s``: None to spool only (the controller ships); ``system_metrics`` samples
    MLflow's system metrics into the same run.
    """

    def __init__(
        self,
        uri: str,
        run_id: str | None,
        spool_dir: str | Path | None = None,
        flush_every_s: float = 2.0,
        ship_every_s: float | None = 6.0,
        max_backoff_s: float | None = None,  # as the outbox's (client.retry_s: 10 s)
        tags: Mapping[str, str] | None = None,
        system_metrics: bool = False,
    ) -> None:
        self.uri = uri
        self.spool = Spool(spool_dir or tempfile.mkdtemp(prefix="hyperfleet-spool-"))
        self.run_id = run_id or f"{PENDING}?"
        self.spool.bind(self.run_id)
        self.through = self.spool.through("report")  # the last report step already logged
        self._client: Any = None
        self._buf: list[Point] = []
        self._tags: dict[str, str] = dict(tags or {})
        self._lock = threading.Lock()
        self._writing = threading.Lock()  # one appender at a time (the order of the points)
        self._unwritable = False  # the last append failed (warned once)
        self._stop = threading.Event()
        self._every = flush_every_s
        # None: the spool only (the controller ships it)
        self._ship_every = None if ship_every_s is None else max(ship_every_s, flush_every_s)
        self._max_backoff = retry_s() if max_backoff_s is None else max_backoff_s
        self._next_ship = time.monotonic() + (self._ship_every or 0.0)
        self._backoff = min(self._ship_every or 0.0, self._max_backoff)  # after a failure
        self._down_since: float | None = None
        self.sent = 0  # points this sink shipped (benchmarks, tests)
        self.system = (
            SystemSampler(self, first_step=self.spool.through("system") + 1)
            if system_metrics
            else None
        )
        self._thread = threading.Thread(target=self._loop, name="metric-sink", daemon=True)
        self._thread.start()

    # -- the training thread's side ----------------------------------------------------------

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        """Append ``metrics`` at ``step`` to the spool (non-finite values are dropped); if
        the file can't be written, they wait in memory for the next flush."""
        now = int(time.time() * 1000)
        items = [(k, float(v), now, step) for k, v in metrics.items() if math.isfinite(float(v))]
        with self._lock:
            self._buf.extend(items)
        self._spool_buffered(tags=False)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        with self._lock:
            self._tags.update(tags)

    # -- the background thread's side --------------------------------------------------------

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = open_client(self.uri)
        return self._client

    def _spool_buffered(self, tags: bool = True) -> None:
        """Append the buffered points (and tags) to the spool, in order: one writer at a time,
        so points reach the file in the order they were logged."""
        with self._writing:
            with self._lock:
                points, self._buf = self._buf, []
                tags_now, self._tags = (self._tags, {}) if tags else ({}, self._tags)
            self._append(points, tags_now)

    def _append(self, points: list[Point], tags: dict[str, str]) -> None:
        try:
            self.spool.append(points, tags)
        except OSError as exc:
            if not self._unwritable:  # once per streak of failures, not once per report
                logger.warning("cannot write the MLflow spool %s: %s", self.spool.path, exc)
            self._unwritable = True
            with self._lock:  # keep them in memory; the next flush tries again
                self._buf[:0] = points
                self._tags = {**tags, **self._tags}
        else:
            self._unwritable = False

    def _resolved(self) -> str | None:
        if is_pending(self.run_id):
            created = self.spool.run_id()
            if created is None:
                return None
            self.run_id = created
            self.spool.bind(created)
        return self.run_id

    def _ship(self) -> bool:
        """Send what the spool holds; False while MLflow is unreachable (or the run pending)."""
        run_id = self._resolved()
        if run_id is None:
            return False
        try:
            self.sent += self.spool.ship(self.client, run_id)
        except Exception as exc:
            if not is_transient(exc):
                raise
            if self._down_since is None:
                self._down_since = time.monotonic()
                logger.warning(
                    "MLflow unreachable (%s); reports are kept in %s and sent when it is back",
                    first_line(exc, 200),
                    self.spool.path,
                )
            return False
        if self._down_since is not None:
            logger.warning(
                "MLflow is back after %.0f s; spooled reports sent",
                time.monotonic() - self._down_since,
            )
            self._down_since = None
        return True

    def flush(self) -> bool:
        """Spool what is buffered and ship it; True when nothing is left unsent."""
        self._spool_buffered()
        return self._ship()

    def _tick(self) -> None:
        self._spool_buffered()
        now = time.monotonic()
        if self._ship_every is None or now < self._next_ship:
            return
        if self._ship():
            self._backoff = min(self._ship_every, self._max_backoff)
            self._next_ship = now + self._ship_every
        else:
            self._next_ship = now + self._backoff
            self._backoff = min(self._backoff * 2, self._max_backoff)

    def _loop(self) -> None:
        while not self._stop.wait(self._every):
            try:
                self._tick()
            except Exception:
                logger.warning("MLflow sink: unexpected failure; retrying", exc_info=True)

    def close(self, ship: bool = True) -> None:
        """Final sample and flush; what MLflow cannot take now stays in the spool.

        ``ship=False`` writes the last records to the spool only: a trial under a controller
        ends without waiting for MLflow, and the controller ships the spool when it ends the
        trial's run (off its own thread, :meth:`~.tracker.SweepTracker.end_child`)."""
        if self.system is not None:
            self.system.close()
        self._stop.set()
        self._thread.join(timeout=60)
        if not ship:
            self._spool_buffered()
            return
        try:
            done = self.flush()
        except Exception:
            logger.warning("MLflow sink: final flush failed", exc_info=True)
            done = False
        if not done:
            logger.warning(
                "%d bytes of MLflow records wait in %s; they are sent when MLflow is back "
                "(or by `hyperfleet mlflow sync`)",
                self.spool.unsent_bytes(),
                self.spool.path,
            )
