"""How often a controller looks, and the pace of a large fleet.

:class:`Timing` holds a controller's intervals (its ticks, asks, heartbeats, rescans) and how
long it waits for things. In a fleet of more than :data:`LOOKERS` live workers each worker
takes its share of the looks: its idle asks and its looks for stale trials are spaced by
:func:`paced`, so the fleet keeps one pace on the database whatever its size.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from hyperfleet.platform.clock import HEARTBEAT_EVERY_S, STALE_AFTER_S
from hyperfleet.platform.launcher.base import STOP_GRACE_S

LOOKERS = 32
"""About how many looks for stale trials a fleet makes per ``stale_after / 3``, however many
workers it has (:meth:`.loop.Controller._recovery_every`)."""


@dataclass(frozen=True)
class Timing:
    """How often the controller looks, heartbeats, and how long it waits for things."""

    poll_every: float = 0.1  # between loop iterations
    ask_every: float = 2.0  # after the scheduler had nothing, ask again after this (or an end)
    heartbeat_every: float = HEARTBEAT_EVERY_S  # the worker's and its trials' heartbeat
    stale_after: float = STALE_AFTER_S  # a worker or RUNNING trial silent this long is gone
    stop_grace: float = STOP_GRACE_S  # SIGTERM to SIGKILL when stopping trials
    rescan_every: float = 2.0  # a worker looks for new sweeps, stale trials, open gangs


def paced(seconds: float, share: float) -> float:
    """An idle worker's wait of ``seconds``, in a fleet where it is one of ``share`` times
    as many workers as need to look (the controller's ``LOOKERS``): that many times longer,
    at a random phase, so the fleet's looks keep one pace whatever its size (1,000 simulated
    workers idle at a sweep's end asked and looked every 2 s each: thousands of queries a
    second, their heartbeats late). Unchanged in a small fleet."""
    return seconds if share <= 1.0 else seconds * share * random.uniform(0.5, 1.5)
