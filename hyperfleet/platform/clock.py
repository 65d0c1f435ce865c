"""Time as the controller sees it: the system's, or a virtual clock for simulated sweeps.

The controller reads the time and waits only through a :class:`Clock`, so a sweep of
simulated trials (:mod:`hyperfleet.platform.launcher.simulated`) runs hours of virtual time
in milliseconds: each wait advances the virtual clock instead of sleeping.

The liveness defaults live here too (``controller.Timing``, ``hyperfleet worker``, submitting a
sweep): a worker heartbeats every ``HEARTBEAT_EVERY_S``; one silent for ``STALE_AFTER_S`` is
taken for lost and its RUNNING trials are requeued; a storage outage is ridden out for
``DEFAULT_RETRY_S`` (:mod:`.storage.retry`; the sweep file's ``storage_retry``), kept here so
that the sweep file's model reads it without importing storage (SQLAlchemy) ahead of the first
trials' processes.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

HEARTBEAT_EVERY_S = 3.0  # the worker's and its RUNNING trials' heartbeat in storage
STALE_AFTER_S = 30.0  # a worker or RUNNING trial silent this long is gone
DEFAULT_RETRY_S = 120.0  # a storage outage is retried this long before it is an error


class Clock(Protocol):
    def time(self) -> float:
        """Wall-clock seconds since the epoch (what storage records)."""

    def monotonic(self) -> float:
        """Seconds for durations and deadlines."""

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        """Wait ``seconds`` or until ``stop`` is set; True if it is set."""


class SystemClock:
    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        return stop.wait(seconds)


class VirtualClock:
    """A clock that only moves when waited on (or :meth:`advance`\\ d)."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._start = start
        self._elapsed = 0.0

    def time(self) -> float:
        return self._start + self._elapsed

    def monotonic(self) -> float:
        return self._elapsed

    def advance(self, seconds: float) -> None:
        self._elapsed += seconds

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        if stop.is_set():
            return True
        self.advance(seconds)
        return stop.is_set()
