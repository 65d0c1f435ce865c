"""A sweep a user paused or stopped, as each controller serving it leaves it.

``sweep pause`` and ``sweep stop`` write the sweep's status in storage and nothing else
(:mod:`hyperfleet.platform.sweeps.lifecycle`); every controller serving the sweep (a fleet's
``hyperfleet worker``, the local worker of a ``sweep run`` in any process) reads the status of
its sweeps each time it looks for new ones (``Timing.rescan_every``) and acts on it:

* **paused** — its running trials are stopped (SIGTERM: they unwind, their checkpoints kept)
  and go back to the queue (WAITING, no retry counted), exactly as a drain requeues them; the
  controller lets the sweep go without ending it (MLflow: those trials' runs wait, SCHEDULED).
  A paused sweep is not served (:data:`~hyperfleet.spec.states.SWEEP_SERVED`), so no worker
  claims its trials and no elastic pool submits jobs for it. A controller that serves named
  sweeps keeps waiting for it (``sweep run`` does not end): once resumed, the sweep is served
  again and its requeued trials continue from their checkpoints.
* **stopped** — its running trials are stopped the same way and end FAIL with the reason
  (:data:`~hyperfleet.platform.tracking.records.STOPPED_ERROR`): not retried, not requeued,
  their reports and checkpoints kept. The sweep is closed as stopped: the last controller to
  leave it (none of its trials running anywhere) ends its MLflow run KILLED, tagged STOPPED.
  A stopped sweep is never served again.

Between the user's write and a controller's look (every ``rescan_every``, 2 s) a controller
may still claim a trial of the sweep; it is stopped at that look like the others. In a fleet of
more than :data:`~.pace.LOOKERS` live workers each looks at its share of that pace
(:func:`~.pace.paced`, as its looks for stale trials): the fleet's reads of the statuses keep
one rate whatever its size, and a pause reaches each of 256 workers within about 16 s.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field

from hyperfleet.platform.controller.driver import SweepDriver
from hyperfleet.platform.controller.pace import paced
from hyperfleet.platform.controller.session import close_session, leave_session
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.results import SweepSummary
from hyperfleet.platform.tracking.records import STOPPED_ERROR
from hyperfleet.spec.states import SweepStatus

logger = logging.getLogger(__name__)

__all__ = ["Halts"]


@dataclass
class Halts:
    """What a controller does with its sweeps that a user paused or stopped (see the module
    docstring). ``catalog``: the storage its sweeps source reads (None: a fixed set of
    sweeps, which is never served again once left)."""

    catalog: Storage | None
    every: float  # seconds between looks (``Timing.rescan_every``), paced in a large fleet
    parked: set[str] = field(default_factory=set)
    """Sweeps this controller left paused: it waits while they stay paused."""
    _next: float = field(default=float("-inf"), init=False)  # monotonic time of the next look

    def leave(
        self, drivers: dict[str, SweepDriver], counts_only: bool, now: float, share: float
    ) -> dict[str, SweepSummary]:
        """Leave the sweeps of ``drivers`` (removed from it) that a user paused or stopped;
        the summaries of the stopped ones. Sweeps left paused earlier and no longer paused are
        let go: served again by the sweeps' source, or over. ``now``: the controller's
        monotonic clock; ``share``: its share of a large fleet (nothing is read before its
        next look is due)."""
        if now < self._next:
            return {}
        self._next = now + paced(self.every, share)
        stopped: dict[str, SweepSummary] = {}
        for name, d in list(drivers.items()):
            status = d._db(functools.partial(d.session.storage.lifecycle.status, name))
            if status is SweepStatus.PAUSED:
                pause(d)
                if self.catalog is not None:
                    self.parked.add(name)
            elif status is SweepStatus.STOPPED:
                stopped[name] = stop(d, counts_only)
            else:
                continue
            del drivers[name]
        if self.catalog is not None:
            for name in list(self.parked):
                if self.catalog.lifecycle.status(name) is not SweepStatus.PAUSED:
                    self.parked.discard(name)
        return stopped


def pause(d: SweepDriver) -> None:
    """The sweep of ``d`` was paused: its running trials back in the queue, the sweep let go
    without ending it."""
    logger.warning(
        "sweep %s was paused: %d running trial(s) go back to the queue; no trial of it is "
        "claimed until hyperfleet sweep resume", d.name, len(d.running),
    )  # fmt: skip
    d.stop_all()
    leave_session(d.session)


def stop(d: SweepDriver, counts_only: bool) -> SweepSummary:
    """The sweep of ``d`` was stopped: its running trials end FAIL (stopped), and the sweep
    is closed as stopped; its summary."""
    logger.warning(
        "sweep %s was stopped: %d running trial(s) end; it is not served again",
        d.name, len(d.running),
    )  # fmt: skip
    d.stop_all(error=STOPPED_ERROR)
    return close_session(d.session, False, counts_only, stopped=True)
