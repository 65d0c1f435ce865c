"""A worker's claim of a sweep's next trial, and the suggestions it makes ahead for the fleet.

A claim hands a trial to one worker: recorded RUNNING with it at once, never to two workers,
never past ``budget.trials`` or ``budget.max_concurrent``. The scheduler's suggestion and its
record are made under the sweep's claim lock. For a scheduler whose suggestions may be made
before they are asked for (``Capabilities.ahead``: Optuna's samplers), a fleet keeps
``depth`` of them made ahead (:mod:`hyperfleet.platform.storage.ahead`):

* a claim first takes one of them, in one short transaction without the claim lock
  (PostgreSQL): claims no longer queue behind every suggestion;
* none left: it takes the claim lock, takes one a refill made while it waited, or makes its
  own -- and, if it waited for the lock, about as many more as claims queued before it (its
  wait over its own suggestion's time, up to ``depth``): a queue (every worker's first claim
  at once) is served by suggestions made together, a fleet without one waits for none;
* after launching the trial it took, a worker that left fewer than half of ``depth`` ahead
  makes more, one suggestion per hold of the claim lock and only while the lock is free
  (``pg_try_advisory_lock``): a claim waiting for the lock waits for one suggestion at most,
  never for a whole refill (holding the lock for ``depth`` suggestions at once made the
  claims that found none wait for all of them: a p99 of 1.5 s against 0.6 s without, at 256
  workers).

``depth`` is ``budget.ahead``, or by default one per :data:`WORKERS_PER_AHEAD` live workers on
PostgreSQL and none on SQLite (one host, a few workers: no queue to avoid). A suggestion made
ahead is one more made without the results of the trials that end meanwhile; with W workers
each suggestion already misses up to W running trials' results, and W / 32 more adds about
3 % to that, so small fleets (under 32 workers) make none and keep every suggestion as fresh
as it is today. A scheduler that does not learn from results (random, QMC, grid:
``Scheduler.learns_from_results``) loses nothing by it, so its depth is one per live worker:
every worker's next claim can find its trial made, even when a fleet's trials end together
(1,000 simulated workers whose trials ended within a minute of each other queued for the
lock behind a depth of 31 for minutes).

A refill makes suggestions for at most :data:`REFILL_SLICE_S` at a time (it runs in the
worker's loop), and a worker that left the queue ahead short tops it up between launches too,
at most every :data:`TOP_UP_EVERY_S` (:meth:`Claims.top_up`): a fleet whose trials all run
fills it before they end, not only at its launches.

A new sweep starts with the queue a full fleet keeps (:func:`.depth.first_fill`): the depth for
``budget.max_concurrent`` live workers, made when the sweep is created, before any worker
asks. Without it a fleet's first claims, all at once, found nothing made and queued for the
claim lock while suggestions were made one at a time (1,000 simulated workers: a start-up
wave whose claims waited up to 70 s).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hyperfleet.platform.clock import STALE_AFTER_S, Clock
from hyperfleet.platform.controller.depth import WORKERS_PER_AHEAD, default_depth
from hyperfleet.platform.schedulers import Suggestion, TrialState
from hyperfleet.platform.storage import worker_identity
from hyperfleet.platform.storage.ahead import Made

if TYPE_CHECKING:
    from hyperfleet.platform.controller.session import SweepSession

__all__ = ["WORKERS_PER_AHEAD", "Claims"]

logger = logging.getLogger(__name__)

QUEUE_WAIT_S = 0.05
"""A claim that waited less than this for the claim lock found no queue worth serving ahead."""

DEPTH_EVERY_S = STALE_AFTER_S
"""How long a worker keeps its count of live workers (the default depth) before counting
again: a thousand workers counting at every claim would be a query per claim, and a worker
counts as live for ``stale_after`` after its last heartbeat anyway."""

REFILL_SLICE_S = 1.0
"""A refill stops making suggestions after this long; the worker's next one goes on."""

TOP_UP_EVERY_S = DEPTH_EVERY_S
"""How often a worker that left the queue ahead short tops it up between launches (a look
every 5 s of each of 1,000 simulated workers, with its queries' CPU, starved their loops on 2
cores until their heartbeats were late)."""


@dataclass(eq=False)
class Claims:
    """One worker's claims of one sweep's trials (see the module docstring)."""

    session: SweepSession
    clock: Clock
    worker: str | None
    stale_after: float  # a worker silent this long is not live (the default depth)
    _depth: int = field(default=0, init=False)
    _depth_at: float | None = field(default=None, init=False)
    _left: int | None = field(default=None, init=False)  # ahead after this worker's last take
    _topped_at: float | None = field(default=None, init=False)
    _spent: bool = field(default=False, init=False)  # a refill found the budget used up

    @property
    def ahead(self) -> bool:
        """The sweep's scheduler makes suggestions that may be kept ahead."""
        return self.session.scheduler.capabilities.ahead

    def depth(self) -> int:
        """How many suggestions the fleet keeps ahead (0: none; see the module docstring)."""
        if not self.ahead:
            return 0
        s = self.session
        if s.cfg.budget.ahead is not None:
            return s.cfg.budget.ahead
        if not s.storage.ahead.takes_without_lock:
            return 0
        now = self.clock.monotonic()
        if self._depth_at is None or now - self._depth_at >= DEPTH_EVERY_S:
            live = s.storage.workers.count_live(self.stale_after)
            self._depth = default_depth(s.cfg, s.scheduler, live)
            self._depth_at = now
        return self._depth

    def _fields(self) -> dict[str, Any]:
        host, pid = worker_identity()
        now = self.clock.time()
        return dict(
            state=TrialState.RUNNING, host=host, pid=pid, worker=self.worker, heartbeat_at=now,
            started_at=now, ended_at=None, outcome=None,
        )  # fmt: skip

    def _take(self, limit: int) -> Suggestion | None:
        taken = self.session.storage.ahead.take(self.name, limit, **self._fields())
        if taken is None:
            if self._left is None:
                self._left = 0  # found none ahead
            return None
        (number, params), self._left = taken
        return Suggestion(trial_number=number, params=params)

    @property
    def name(self) -> str:
        return self.session.name

    def claim(self) -> Suggestion | None:
        """The next trial for this worker, recorded RUNNING with it; None when the sweep runs
        ``max_concurrent`` trials or its scheduler has nothing now."""
        s, storage = self.session, self.session.storage
        limit = s.cfg.budget.max_concurrent
        # counted once without the lock too, so that workers with nothing to run now do not
        # queue for it
        if storage.trials.running_elsewhere(s.name, None) >= limit:
            return None
        # a take when the fleet keeps some ahead, or until this worker found none (a new
        # sweep's first fill, whatever the live workers' count)
        took = (
            self.ahead
            and storage.ahead.takes_without_lock
            and (self._left != 0 or self.depth() > 0)
        )
        if took:
            taken = self._take(limit)
            if taken is not None:
                return taken
        # idle workers at a sweep's end do not queue for the lock (once nothing is ahead
        # either: on SQLite, or a small fleet, a take waits for the lock)
        if (took or not self.ahead) and s.scheduler.exhausted():
            return None
        asked = time.monotonic()
        with storage.claim_lock(s.name):
            waited = time.monotonic() - asked
            if self.ahead:
                taken = self._take(limit)  # made by a refill while this claim waited
                if taken is not None:
                    return taken
            if storage.trials.running_elsewhere(s.name, None) >= limit:
                return None
            started = time.monotonic()
            suggestion = s.scheduler.suggest()
            if suggestion is None:
                return None
            if not self.ahead:
                storage.trials.upsert(s.name, suggestion.trial_number, **self._fields())
                return suggestion
            made = [(suggestion.trial_number, suggestion.params)]
            queued = self._queued(waited, time.monotonic() - started)
            made += self._make(queued, until=time.monotonic() + REFILL_SLICE_S)
            self._left = len(made) - 1
            if storage.ahead.record_claim(s.name, made, limit, **self._fields()):
                return suggestion
            return None  # a take filled the last slot meanwhile: it waits ahead

    def _queued(self, waited: float, suggestion_s: float) -> int:
        """How many more suggestions a claim that made its own makes ahead: about as many
        claims as queued before it for the lock (``waited`` over its own suggestion's
        time), up to the depth, made for at most :data:`REFILL_SLICE_S` (the claim itself
        waits for them: at a depth of one per worker, 1,000 simulated workers' first claims
        waited minutes for holders making hundreds). A claim that did not wait makes none, so
        a queue-free fleet never waits for suggestions of others; a queue (every worker's
        first claim at once) is served by suggestions made together, each claim behind taking
        one at once."""
        if waited < QUEUE_WAIT_S:
            return 0
        return min(self.depth(), int(waited / max(suggestion_s, 0.001)))

    def _make(self, n: int, until: float | None = None) -> list[Made]:
        """Up to ``n`` more suggestions of the scheduler (fewer when its budget ends, or when
        ``time.monotonic()`` passes ``until``)."""
        made: list[Made] = []
        for _ in range(n):
            if until is not None and time.monotonic() >= until:
                break
            more = self.session.scheduler.suggest()
            if more is None:
                break
            made.append((more.trial_number, more.params))
        return made

    def top_up(self) -> int:
        """Between launches, at most every :data:`TOP_UP_EVERY_S`: :meth:`refill`, unless a
        refill of this worker found the budget used up; how many it made."""
        if self._spent or self._left is None:
            return 0
        now = self.clock.monotonic()
        if self._topped_at is not None and now - self._topped_at < TOP_UP_EVERY_S:
            return 0
        self._topped_at = now
        return self.refill()

    def refill(self) -> int:
        """After a launch: if this worker's last claim left fewer than half of the depth
        ahead, make suggestions up to it, one per hold of the claim lock, while the lock is
        free (a claim waiting for it goes first, and the refill stops) and for at most
        :data:`REFILL_SLICE_S`; how many it made."""
        depth = self.depth()
        if depth == 0 or self._left is None or self._left >= (depth + 1) // 2:
            return 0
        storage = self.session.storage
        have: int | None = None
        made = 0
        until = time.monotonic() + REFILL_SLICE_S
        while time.monotonic() < until:
            with storage.try_claim_lock(self.name) as held:
                if not held:
                    break  # another worker refills, or a claim waits for the lock: later
                if have is None:
                    if self.session.scheduler.exhausted():  # one count: nothing to make
                        self._spent = True
                        break
                    have = storage.ahead.count(self.name)
                if have >= depth:
                    break
                more = self._make(1)
                if not more:
                    self._spent = True
                    break  # the budget is used up
                storage.ahead.put(self.name, more)
            have, made = have + 1, made + 1
        if have is not None:
            self._left = have
        return made
