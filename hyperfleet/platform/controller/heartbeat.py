"""A worker's heartbeat, on a thread of its own.

A worker is alive as long as its row in ``hf_workers`` and its RUNNING trials are stamped
every ``heartbeat_every`` seconds; a worker silent for ``stale_after`` is taken for lost and
its trials are requeued by others. The controller's loop can pause for seconds (opening a
sweep, creating MLflow runs, a slow database) without being lost, because the stamping runs on
this thread, through its process's heartbeat pool (``lane="heartbeat"``,
:mod:`hyperfleet.platform.storage.engine`): the worker's own work, however much of it, cannot
hold every connection it could beat on.

Each heartbeat also returns the trials still RUNNING under this worker. One that is missing
was requeued by another worker meanwhile (this one was silent too long after all): the
controller stops its local copy (fencing), so one trial never has two live copies.
"""

from __future__ import annotations

import logging
import threading
import time

from hyperfleet.errors import StorageOutageError, first_line
from hyperfleet.platform.storage import Storage
from hyperfleet.spec.states import WorkerState

logger = logging.getLogger(__name__)


class Heartbeat(threading.Thread):
    def __init__(self, storage_url: str, worker: str, every: float) -> None:
        super().__init__(name="worker-heartbeat", daemon=True)
        self.storage = Storage(storage_url, create=False, retry_s=every, lane="heartbeat")
        self.worker = worker
        self.every = every
        self._stop_event = threading.Event()
        self._lock = threading.Lock()
        self._owned: set[tuple[str, int]] | None = None
        self._taken_at = 0.0
        self._began = -float("inf")  # time.monotonic() of the last heartbeat's start

    def run(self) -> None:
        while not self._stop_event.wait(self.every):
            try:
                self.beat_now()
            except Exception as exc:  # noqa: BLE001 - one line; the loop says what it means
                outage = exc.outage if isinstance(exc, StorageOutageError) else ""
                what = outage or first_line(exc)  # not the CLI's "stopped cleanly"
                logger.warning(
                    "worker heartbeat failed: %s; the next beat tries again in %g s",
                    what,
                    self.every,
                )

    def beat_now(self, unless_within: float = 0.0) -> None:
        """One heartbeat now (also from the controller's thread, before it judges others),
        unless one began less than ``unless_within`` seconds ago: a worker that was paused
        (SIGSTOP, a long stall) still beats afresh before judging, and a fleet's looks for
        stale trials do not double its heartbeats."""
        began = time.monotonic()
        with self._lock:
            if began - self._began < unless_within:
                return
        taken = time.time()
        owned = self.storage.workers.beat(self.worker)
        with self._lock:
            if taken >= self._taken_at:
                self._owned, self._taken_at, self._began = owned, taken, began

    def owned(self) -> tuple[set[tuple[str, int]] | None, float]:
        """The trials RUNNING under this worker at the last heartbeat, and when it began."""
        with self._lock:
            return self._owned, self._taken_at

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)
        try:
            self.storage.workers.beat(self.worker, WorkerState.STOPPED)
        except Exception:  # noqa: BLE001 - the row goes stale and reads as lost instead
            logger.warning("could not mark worker %s stopped", self.worker)
        self.storage.close()
