"""How many suggestions a fleet keeps made ahead (:mod:`.claims`), and a new sweep's first.

Apart from :mod:`.claims` so that :mod:`.session`, which makes a new sweep's first ones, and
:mod:`.claims`, which reads a session, do not import each other.
"""

from __future__ import annotations

import logging
import time

from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.schedulers import Scheduler
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.ahead import Made

logger = logging.getLogger(__name__)

WORKERS_PER_AHEAD = 32
"""By default a fleet keeps one suggestion made ahead per this many live workers."""

FIRST_FILL_S = 10.0
"""A new sweep's first suggestions ahead are made for at most this long (random search on an
idle PostgreSQL: about 7 ms each, so 1,000 take 7 s); the fleet's refills make the rest."""


def default_depth(cfg: SweepConfig, scheduler: Scheduler, live: int) -> int:
    """How many suggestions ``live`` workers keep ahead: ``budget.ahead``, or one per
    :data:`WORKERS_PER_AHEAD` of them, one each for a search that does not learn from results
    (the caller has checked that the scheduler's suggestions may be made ahead at all)."""
    given = cfg.budget.ahead
    if given is not None:
        return given
    return live // WORKERS_PER_AHEAD if scheduler.learns_from_results() else live


def first_fill(cfg: SweepConfig, storage: Storage, scheduler: Scheduler) -> int:
    """At a sweep's creation (under its claim lock): make the suggestions ahead that a fleet of
    ``budget.max_concurrent`` workers keeps, for at most :data:`FIRST_FILL_S`, so that the
    fleet's first claims take them (see the module docstring); how many it made. None on
    SQLite, for schedulers that make none ahead, or with ``budget.ahead: 0``."""
    if not (scheduler.capabilities.ahead and storage.ahead.takes_without_lock):
        return 0
    want = default_depth(cfg, scheduler, cfg.budget.max_concurrent)
    made, kept = 0, list[Made]()
    until = time.monotonic() + FIRST_FILL_S
    while made < want and time.monotonic() < until:
        more = scheduler.suggest()
        if more is None:
            break  # the budget is used up
        kept.append((more.trial_number, more.params))
        made += 1
        if len(kept) == 100:  # kept as made: a crash leaves few unrecorded (phantoms)
            storage.ahead.put(cfg.name, kept)
            kept = []
    if kept:
        storage.ahead.put(cfg.name, kept)
    if made:
        logger.info("%s: %d suggestions made ahead for the fleet's first claims", cfg.name, made)
    return made
