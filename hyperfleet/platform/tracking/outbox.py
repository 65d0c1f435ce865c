"""The controller's MLflow writes, in order, off its thread, retried through an outage.

Ending a trial's run, marking the best trial, writing the lineage: none of it may hold up the
sweep loop, and none of it may be lost because the tracking server is away for a while. The
controller puts each write in the :class:`Outbox` as one *operation* (a function that does a
few MLflow calls and is safe to run again: it writes absolute values, and points with the
timestamps they were taken at). One thread runs them strictly in order, so an operation that
needs a run sees it created by an earlier one. When an operation fails because MLflow cannot be
reached, the thread waits (0.5 s, doubling up to ``max_backoff_s``) and runs it again; the
operations behind it wait their turn. An operation MLflow rejects as invalid is logged and
dropped.

The queue lives in memory; what it would lose with the controller is rebuilt from storage by
``hyperfleet mlflow sync`` (:mod:`.sync`).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from hyperfleet.platform.tracking.client import is_transient, retry_s

logger = logging.getLogger(__name__)


class Ticket:
    """A queued operation's claim check: :meth:`cancel` drops it if it has not begun."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = "queued"

    def _move(self, to: str) -> bool:
        with self._lock:
            if self._state == "queued":
                self._state = to
            return self._state == to

    def begin(self) -> bool:
        """The outbox takes it: False if it was cancelled first."""
        return self._move("begun")

    def cancel(self) -> bool:
        """True if the operation will never run (it had not begun)."""
        return self._move("cancelled")


@dataclass
class _Op:
    what: str
    fn: Callable[[], None]
    ticket: Ticket


class Outbox:
    """Ordered, retried MLflow operations on a background thread (see the module docstring)."""

    def __init__(self, max_backoff_s: float | None = None) -> None:
        self.max_backoff_s = retry_s() if max_backoff_s is None else max_backoff_s
        self._ops: collections.deque[_Op] = collections.deque()
        self._cond = threading.Condition()
        self._busy = False
        self._closed = False
        self.failing_since: float | None = None  # monotonic time of the first failed attempt
        self.last_error = ""
        self._thread = threading.Thread(target=self._loop, name="mlflow-outbox", daemon=True)
        self._thread.start()

    def put(self, what: str, fn: Callable[[], None]) -> Ticket:
        """Queue ``fn`` (``what`` names it in logs); its ticket."""
        op = _Op(what, fn, Ticket())
        with self._cond:
            self._ops.append(op)
            self._cond.notify_all()
        return op.ticket

    @property
    def pending(self) -> int:
        """Operations not done yet (the running one included)."""
        with self._cond:
            return len(self._ops) + int(self._busy)

    @property
    def healthy(self) -> bool:
        """False while an operation keeps failing (MLflow unreachable)."""
        return self.failing_since is None

    def drain(self, timeout: float) -> bool:
        """Wait until every queued operation is done, at most ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._ops or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self) -> None:
        """Stop the thread (operations still queued are dropped)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _next(self) -> _Op | None:
        with self._cond:
            while True:
                while not self._ops and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return None
                if self._ops[0].ticket.begin():
                    self._busy = True
                    return self._ops[0]
                self._ops.popleft()  # cancelled before its turn
                self._cond.notify_all()

    def _done(self) -> None:
        with self._cond:
            self._ops.popleft()
            self._busy = False
            self._cond.notify_all()

    def _loop(self) -> None:
        backoff = 0.5
        while (op := self._next()) is not None:
            try:
                op.fn()
            except Exception as exc:  # noqa: BLE001 - decided below: retry or drop
                if is_transient(exc):
                    self._failed(op, exc)
                    with self._cond:
                        self._busy = False
                        self._cond.wait(backoff)  # close() cuts the wait short
                    backoff = min(backoff * 2, self.max_backoff_s)
                    continue
                logger.warning("MLflow rejected %s; skipped: %s", op.what, exc)
            if self.failing_since is not None:
                logger.warning(
                    "MLflow is back after %.0f s; queued writes resume",
                    time.monotonic() - self.failing_since,
                )
                self.failing_since = None
            backoff = 0.5
            self._done()

    def _failed(self, op: _Op, exc: BaseException) -> None:
        self.last_error = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        if self.failing_since is None:
            self.failing_since = time.monotonic()
            logger.warning(
                "MLflow unreachable (%s); %s and what follows wait for it", self.last_error, op.what
            )
