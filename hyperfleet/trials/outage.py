"""An object store replica's outage as a trial sees it: since when the store has not answered,
which checkpoints' uploads were skipped meanwhile, and the note that tells the trial's record
(see :mod:`hyperfleet.trials.replica`).

The outage begins when a call to the store fails, or when a save finds no upload slot within
its bound, at the time the unanswered call began; it ends at the first call that succeeds.
:meth:`StoreOutage.tell` is called on the saving thread: it hands ``notify`` a new note only
when what it says changed (``checkpoint replica URL unreachable since TIME: N uploads
skipped (steps ...)``, and once the store answers again ``... was unreachable from T1 to T2``),
so the trial's record, ``sweep status`` and the live view show the outage as it stands.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger("hyperfleet.trials.checkpoint")

#: skipped steps a note names (the rest are counted)
NOTED_STEPS = 5


def clock(when: float | None) -> str:
    """``2026-12-07 04:10:00 UTC``: a wall-clock time (now for None) in notes and logs."""
    stamp = datetime.datetime.fromtimestamp(when or time.time(), datetime.timezone.utc)
    return stamp.strftime("%Y-%m-%d %H:%M:%S UTC")


class StoreOutage:
    """The state of one replica's store (see the module docstring)."""

    def __init__(self, url: str, notify: Callable[[str], None] | None) -> None:
        self.url = url
        self.since: float | None = None  # wall clock: when the unanswered call began
        self._notify = notify
        self._skipped: list[int] = []  # uploads skipped in this outage
        self._noted: str | None = None  # the last note told
        self._noted_since: float | None = None  # the outage the notes tell of
        self._lock = threading.Lock()

    def began(self, when: float | None) -> None:
        """A call that began at ``when`` (None: now) got no answer."""
        with self._lock:
            if self.since is None:
                self.since = when or time.time()

    def ended(self) -> None:
        """A call succeeded: the store answers."""
        with self._lock:
            self.since = None

    def skipped(self, step: int, why: str) -> None:
        """``step``'s upload is not done; ``why``: the log line's reason."""
        with self._lock:
            self._skipped.append(step)
        logger.warning(
            "checkpoint step %d not uploaded to %s: %s; its local copy is kept",
            step, self.url, why,
        )  # fmt: skip

    def tell(self) -> None:
        """Hand ``notify`` the note of the outage if it changed (on the saving thread)."""
        with self._lock:
            message = self._message()
        if message is None or message == self._noted or self._notify is None:
            return
        self._noted = message
        try:
            self._notify(message)
        except Exception as exc:  # noqa: BLE001 - a note must never end the trial
            logger.warning("could not record the replica's state: %s", exc)

    def _message(self) -> str | None:
        if self.since is not None:
            self._noted_since = self._noted_since or self.since
            message = f"checkpoint replica {self.url} unreachable since {clock(self.since)}"
        elif self._noted_since is not None:  # the store answers again
            began, self._noted_since = self._noted_since, None
            message = (
                f"checkpoint replica {self.url} was unreachable from {clock(began)} "
                f"to {clock(None)}"
            )
        else:
            return None
        steps = sorted(self._skipped)
        if self.since is None:
            self._skipped = []
        if steps:
            shown = ", ".join(map(str, steps[-NOTED_STEPS:]))
            more = "…, " if len(steps) > NOTED_STEPS else ""
            n = len(steps)
            message += (
                f": {n} upload{'s' * (n > 1)} skipped (steps {more}{shown}); local copies kept"
            )
        return message
