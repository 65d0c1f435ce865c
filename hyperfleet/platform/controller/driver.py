"""One sweep's side of a controller: claim a trial, launch it, reap it, record how it ended.

A :class:`SweepDriver` has no loop of its own: the controller (:mod:`.loop`) ticks the drivers
of every sweep its worker serves. Each claim (:mod:`.claims`) takes a suggestion made ahead or
asks the sweep's scheduler under the sweep's claim lock, and records the trial RUNNING with
this worker at once, so any number of workers keep ``budget.trials`` and
``budget.max_concurrent`` and never take one trial twice.

How a launch ends decides what comes next:

* the trial completed, was pruned or paused (PBT) — recorded as such, devices back at once;
* a NaN or infinite objective — FAIL with the reason;
* the processes failed or were lost — the trial is retried from its checkpoint, up to
  ``budget.max_retries`` times, unless its workload raised the same error as at its previous
  failure (then FAIL with that error: a deterministic error is not retried again);
* stopped (interrupt, drain) — requeued, so any worker resumes it from its checkpoint. A
  trial whose processes end on their own while its worker drains is stopped too, not failed:
  the drain's signal reached them as well (Slurm's ``scancel`` signals every process of the
  job), so no retry is counted.

A sweep whose first ``budget.stop_after_alike_failures`` trials to end all failed with the same
failure line launches no more trials (:mod:`hyperfleet.platform.storage.failures`): each
driver reads it from storage before a claim until that many trials have ended, then knows it
for good; the trials running then end as they would.
"""

from __future__ import annotations

import functools
import logging
import math
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy.exc import SQLAlchemyError

from hyperfleet.errors import StorageError, Superseded
from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.controller.claims import Claims
from hyperfleet.platform.controller.gangs import Gangs, SweepSeat
from hyperfleet.platform.controller.launch import Running, start, started_fields
from hyperfleet.platform.controller.outcomes import CAUSE_LINES, failed, plain, reported
from hyperfleet.platform.controller.pace import Timing, paced
from hyperfleet.platform.controller.prepare import PreparedTrial, prepare
from hyperfleet.platform.controller.recovery import (
    mark_stopped,
    requeue_phantoms_locked,
    requeue_unclaimed,
)
from hyperfleet.platform.controller.resizing import Pending, relaunched
from hyperfleet.platform.controller.session import close_session
from hyperfleet.platform.diskspace import disk_full_error, trial_disk_full
from hyperfleet.platform.launcher.base import NoProcess
from hyperfleet.platform.pool import Lease, LocalPool
from hyperfleet.platform.schedulers import Suggestion, TrialState
from hyperfleet.platform.storage import TrialRecord
from hyperfleet.platform.storage.failures import AlikeWatch, stop_line
from hyperfleet.platform.storage.results import SweepSummary
from hyperfleet.platform.storage.retry import retrying
from hyperfleet.spec.states import GangState, Outcome

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(eq=False)
class SweepDriver(SweepSeat):
    """Claims, launches and reaps the trials of one sweep (see the module docstring)."""

    timing: Timing = field(default_factory=Timing)
    stopping: Callable[[], bool] = field(default=lambda: False)  # its worker drains
    running: dict[int, Running] = field(default_factory=dict, init=False)
    gangs: Gangs = field(init=False)  # trials across hosts
    claims: Claims = field(init=False)  # its claims, and suggestions made ahead
    finished: int = field(default=0, init=False)
    launched: int = field(default=0, init=False)
    _next_ask: float = field(default=0.0, init=False)  # none to ask: again then, or at an end
    disk_full: str | None = field(default=None, init=False)  # where a trial found it full
    claimed: set[int] = field(default_factory=set, init=False)  # every claim answered here
    _orphans_at: float = field(default=-math.inf, init=False)  # the heartbeat last looked at
    pace: float = field(default=1.0, init=False)  # its worker's share of a large fleet (paced)
    alike: AlikeWatch = field(init=False)  # its first trials all failed alike: it stops
    resizes: dict[int, Pending] = field(default_factory=dict, init=False)  # (:mod:`.resizing`)

    def __post_init__(self) -> None:
        self.gangs = Gangs(self.session, self.launcher, self.clock, self.worker, self.address)
        self.claims = Claims(self.session, self.clock, self.worker, self.timing.stale_after)
        n = self.cfg.budget.stop_after_alike_failures
        self.alike = AlikeWatch(self.session.storage, self.name, n)

    @property
    def cfg(self) -> SweepConfig:
        return self.session.cfg

    @property
    def name(self) -> str:
        return self.session.name

    def _db(self, fn: Callable[[], T]) -> T:
        """``fn()`` (scheduler or storage work), riding out a storage outage."""
        return retrying(fn, self.session.storage.retry_s)

    def devices_per_node(self) -> int:
        """What one launch leases from the worker's pool (an in-process trial: one slot)."""
        resources = self.cfg.trial.resources
        return max(1, resources.devices // resources.nodes)

    # -- launching ------------------------------------------------------------------------

    def _claim(self) -> Suggestion | None:
        """The next trial, recorded RUNNING with this worker (:mod:`.claims`)."""
        suggestion = self.claims.claim()
        if suggestion is not None:
            self.claimed.add(suggestion.trial_number)
        return suggestion

    def refill_ahead(self, number: int | None = None) -> int:
        """After trial ``number``'s launch, or between launches (``None``: at most every
        ``TOP_UP_EVERY_S``): suggestions made ahead for the fleet's next claims, if few are
        left (best effort: a claim makes its own when none is); how many were made."""
        if self.alike.cause is not None:  # it launches nothing more
            return 0
        try:
            return self._db(self.claims.refill if number is not None else self.claims.top_up)
        except Exception:
            after = f"after trial {number}" if number is not None else "between launches"
            logger.warning("could not make suggestions ahead %s", after, exc_info=True)
            return 0

    def wants_devices(self) -> bool:
        return self.clock.monotonic() >= self._next_ask

    @property
    def asks_at(self) -> float:
        """When (``clock.monotonic()``) it asks its scheduler again (past: at the next tick)."""
        return self._next_ask

    def try_launch(self, devices: LocalPool) -> bool:
        """Start one trial if devices and a suggestion are there; False if not."""
        pool, k = devices, self.devices_per_node()
        if not self.wants_devices() or pool.size < k:
            return False
        lease = pool.try_acquire(k, self.cfg.trial.resources.per_device)
        if lease is None:
            return False
        if self.halted() is not None:  # asked only with devices free: a busy worker's ticks
            pool.release(lease)  # read nothing (1,000 simulated workers: most of their CPU)
            return False
        try:
            suggestion = self._db(self._claim)
        except BaseException:
            pool.release(lease)
            raise
        if suggestion is None:
            pool.release(lease)
            self._next_ask = self.clock.monotonic() + paced(self.timing.ask_every, self.pace)
            return False
        try:
            prepared = prepare(self.session, suggestion)
            problems = prepared.problems or self._launch_problems(k)
            if problems:  # a sampled combination that breaks a layout rule, or no rendezvous
                self._reject(prepared, lease, pool, "; ".join(problems))
            else:
                self.running[prepared.number] = self._start(prepared, lease, pool)
                self.launched += 1
                self.refill_ahead(prepared.number)
        except Superseded as exc:  # requeued since the claim: its new holder runs it
            logger.warning("trial %d not launched here: %s", suggestion.trial_number, exc)
            pool.release(lease)
            self.session.tracker.disown(suggestion.trial_number)
        except BaseException:
            self._abandon(suggestion.trial_number, lease, pool)
            raise
        return True

    def halted(self) -> str | None:
        """The failure line its first trials all ended with, when the sweep stops for it
        (:class:`~hyperfleet.platform.storage.failures.AlikeWatch`; said once in the log)."""
        known = self.alike.decided
        cause = self._db(self.alike.check)
        if cause is not None and not known:
            logger.warning("sweep %s %s", self.name, stop_line(cause, self.alike.n))
        return cause

    def _start(self, p: PreparedTrial, lease: Lease, pool: LocalPool) -> Running:
        """Launch the claimed trial ``p`` (:func:`.launch.start`)."""
        return start(self, self.gangs, p, lease, pool)

    def _launch_problems(self, ranks: int) -> list[str]:
        """Why the launcher could not start a trial of ``ranks`` processes here (a host name
        that does not resolve: the group would wait forever), as the trial's FAIL reason."""
        spans = self.cfg.trial.resources.nodes > 1
        address = (self.address or socket.gethostname()) if spans else None
        problem = self.launcher.launch_problem(self.cfg.trial, ranks, address)
        return [] if problem is None else [problem]

    def _abandon(self, number: int, lease: Lease, pool: LocalPool) -> None:
        """A claimed trial that could not be launched goes back in the queue (best effort:
        what fails here is found again by recovery)."""
        logger.warning("trial %d could not be launched; it goes back in the queue", number)
        pool.release(lease)
        try:
            self.session.scheduler.requeue(number)
            self.session.storage.trials.upsert(self.name, number, state=TrialState.WAITING)
        except Exception:
            logger.warning("could not requeue trial %d", number, exc_info=True)

    def _reject(self, p: PreparedTrial, lease: Lease, pool: LocalPool, error: str) -> None:
        logger.warning("trial %d rejected before launch: %s", p.number, error)
        fields = started_fields(p, self.worker, self.clock.time())
        self.session.storage.trials.upsert(self.name, p.number, attempts=0, **fields)
        rejected = Running(p.number, NoProcess(), lease, pool, p.spec.run_id or "")
        self.running[p.number] = rejected
        self._end(rejected, TrialState.FAIL, None, error)

    # -- reaping ---------------------------------------------------------------------------

    def _outcome(self, r: Running, code: int) -> tuple[TrialState | None, list[float] | None, str]:
        """The trial's end state (None: paused, WAITING: retried), values and error text."""
        rec = self.session.storage.trials.get(self.name, r.number)
        assert rec is not None
        if code != 0 or rec.outcome not in (Outcome.COMPLETE, Outcome.PRUNED, Outcome.PAUSED):
            if self.stopping():  # ended by the drain's signal too: requeued, no retry
                logger.info("trial %d ended (code %d) while draining; requeued", r.number, code)
                return TrialState.WAITING, None, ""
            return self._failed(rec, code, r.handle.log_tail(), r.handle.log_tail(CAUSE_LINES))
        return reported(rec, self.cfg.all_objectives)

    def _failed(
        self, rec: TrialRecord, code: int, tail: str, log: str
    ) -> tuple[TrialState, None, str]:
        """A failed launch: requeued when the disk is full (the controller then stops), else
        :func:`~hyperfleet.platform.controller.outcomes.failed`."""
        tail, log = plain(tail), plain(log)  # compared with the stored error, itself plain
        full = trial_disk_full(tail, rec.trial_dir)
        if full is not None:  # requeued, no retry counted; the controller stops (reap)
            self.disk_full = self.disk_full or full
            return TrialState.WAITING, None, ""
        return failed(rec, code, tail, self.cfg.budget.max_retries, log)

    def _end(
        self, r: Running, state: TrialState | None, values: list[float] | None, error: str
    ) -> None:
        """Record how the launch ended and give its devices back (a resize: relaunched)."""
        if relaunched(self, r, state):
            return
        scheduler, storage = self.session.scheduler, self.session.storage
        number = r.number
        error = plain(error)  # stored and shown: no terminal escape codes
        extra: dict[str, Any] = {}
        if state is None:  # paused: the scheduler resumes it later
            self._db(lambda: scheduler.on_trial_end(number, TrialState.COMPLETE))
            stored, tracked = TrialState.PAUSED, TrialState.WAITING
        elif state is TrialState.WAITING:  # stopped, or failed with retries left
            self._db(lambda: scheduler.requeue(number))
            stored = tracked = TrialState.WAITING
            if error:  # a retry: count it, keep the error to compare with the next one
                rec = storage.trials.get(self.name, number)
                extra = {"retries": (rec.retries if rec else 0) + 1}
                logger.warning("trial %d failed; retrying it from its checkpoint", number)
        else:
            self._db(lambda: scheduler.on_trial_end(number, state, values, error or None))
            stored = tracked = state
            self.finished += 1
        storage.trials.upsert(self.name, number, state=stored, ended_at=self.clock.time(),
                              error=error or None, **extra)  # fmt: skip
        metrics = [o.metric for o in self.cfg.all_objectives]
        final = dict(zip(metrics, values or [], strict=False))
        try:
            self.session.tracker.end_child(r.run_id, tracked, final, error)
        except Exception:
            logger.warning("could not end MLflow run of trial %d", number, exc_info=True)
        if r.lease_row is not None:
            storage.leases.close(r.lease_row, stored)
        if r.gang is not None:
            storage.gangs.set_state(r.gang, GangState.OVER)
        self._release(r)
        logger.info("trial %d ended %s %s", number, stored, values or "")

    def _release(self, r: Running) -> None:
        if self.running.pop(r.number, None) is not None:
            r.pool.release(r.lease)
        self._next_ask = 0.0

    def _superseded(self, r: Running) -> bool:
        """True (and its devices released) when another worker took the trial over: its
        record is no longer RUNNING under this worker at this copy's attempt, so this copy
        records nothing (and counts no retry)."""
        if self.worker is None and not r.attempt:
            return False
        rec = self.session.storage.trials.get(self.name, r.number)
        if (
            rec is not None
            and rec.state == TrialState.RUNNING
            and rec.worker == self.worker
            and (not r.attempt or rec.attempts == r.attempt)
        ):
            return False
        logger.warning("trial %d was taken over by another worker; this copy stops", r.number)
        r.handle.kill()
        if r.lease_row is not None:
            self.session.storage.leases.close(r.lease_row, TrialState.LOST)
        self._release(r)
        return True

    def fence(self, owned: set[tuple[str, int]], taken_at: float) -> None:
        """Stop the copies of trials no longer RUNNING under this worker at a heartbeat taken
        after they were launched (another worker requeued them); requeue the trials RUNNING
        under it that no claim here was answered with (:func:`.recovery.requeue_unclaimed`)."""
        for r in list(self.running.values()):
            if r.launched_at < taken_at and (self.name, r.number) not in owned:
                self._superseded(r)
        if taken_at <= self._orphans_at:
            return  # this heartbeat's list was looked through
        self._orphans_at = taken_at
        for sweep, number in owned:
            if sweep == self.name and number not in self.claimed:
                requeue_unclaimed(self.session, self.worker, number)

    def reap(self) -> None:
        record = functools.partial(self.session.storage.trials.upsert, self.name)
        for n, run_id in self.session.tracker.take_created():  # runs made off-thread
            self._db(functools.partial(record, n, mlflow_run_id=run_id))
        self.session.tracker.ship_running({n: r.run_id for n, r in self.running.items()})
        for r in list(self.running.values()):
            code = r.handle.poll()
            if code is not None and not self._superseded(r):
                self._end(r, *self._outcome(r, code))
            elif self.gangs.overdue(r.gang):  # its other nodes never came: let the devices go
                logger.warning("trial %d: its gang did not fill in time; requeued", r.number)
                r.handle.stop(self.timing.stop_grace)
                self._end(r, TrialState.WAITING, None, "")
        self.gangs.reap()
        if self.disk_full is not None:
            raise disk_full_error(self.disk_full)

    def enforce_trial_timeout(self) -> None:
        """A launch running longer than ``trial.timeout`` is stopped and FAIL."""
        limit = self.cfg.trial.timeout
        if limit is None:
            return
        for r in list(self.running.values()):
            if r.handle.poll() is None and r.handle.starting:
                r.started = self.clock.monotonic()  # a warm worker still starting: not its time
            if self.clock.monotonic() - r.started > limit and r.handle.poll() is None:
                logger.warning("trial %d timed out after %g s; stopping it", r.number, limit)
                r.handle.stop(self.timing.stop_grace)
                why = f"timed out after {limit:g} s (trial.timeout)"
                self._end(r, TrialState.FAIL, None, why)

    def stop_all(self, error: str = "") -> None:
        """Stop every running trial; those that didn't finish go back in the queue (with an
        ``error``: they end FAIL with it, not retried, as when a user stops the sweep). Their
        processes end even when their records can't be written (a storage outage): then a
        live worker finds them stale and requeues them."""
        self.gangs.stop(self.timing.stop_grace)
        for r in list(self.running.values()):
            code = r.handle.poll()
            if code is None:
                r.handle.stop(self.timing.stop_grace)
            try:
                if self._superseded(r):
                    continue
                if code is None:
                    self._end(r, TrialState.FAIL if error else TrialState.WAITING, None, error)
                else:
                    self._end(r, *self._outcome(r, code))
            except (StorageError, SQLAlchemyError, OSError):  # an outage, a full disk
                logger.warning("trial %d stopped; its record could not be written", r.number)
                mark_stopped(r.handle)  # its requeue on recovery counts no retry
                self._release(r)

    def heartbeat(self) -> None:
        now = self.clock.time()
        for number in list(self.running):
            self.session.storage.trials.upsert(self.name, number, heartbeat_at=now)

    def ask_now(self) -> None:
        """Ask the scheduler on the next tick even if it lately said it had nothing."""
        self._next_ask = 0.0

    def over(self, timed_out: bool) -> bool:
        """Nothing runs here and nothing more will: the scheduler just said it has nothing,
        or time is up. A phantom claim (its claimer died before launching) found now is
        requeued instead."""
        if self.running or self.gangs.members:
            return False
        if timed_out or self.alike.cause is not None:
            return True
        if self.wants_devices():  # not told "nothing" lately: keep asking
            return False
        if self._db(lambda: requeue_phantoms_locked(self.session)):
            self.ask_now()
            return False
        return True

    def close(self, interrupted: bool, counts_only: bool = False) -> SweepSummary:
        return close_session(self.session, interrupted, counts_only)
