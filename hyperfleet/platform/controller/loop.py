"""The controller: ask the scheduler, lease devices, launch trials, reap them, repeat.

One :meth:`Controller.run` drives an open sweep (:mod:`.session`) until the scheduler has
nothing left: for Optuna-based schedulers at most ``budget.trials`` trials (counting every
finished and running one); for PBT until every member reached its step budget. At most
``budget.max_concurrent`` trials run at once, and only while devices are free; no new trial
starts after ``budget.timeout`` (running trials finish). Every state that must survive a crash
is written to storage before the loop moves on.

Its parts are injected — the scheduler and storage (in the session), the device pool, the
launcher, the clock — so the same loop runs torchrun trials, in-process trials and simulated
trials on a virtual clock; it never asks which.

:meth:`Controller.request_stop` (SIGINT/SIGTERM in the CLI) stops the trials (SIGTERM, then
SIGKILL after a grace period) and requeues them with their params, checkpoint and MLflow run,
so running the same sweep again continues each one; COMPLETE trials are never rerun. A trial
that pauses (PBT time-sharing) gives its devices back and is resumed later by the scheduler.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy.exc import SQLAlchemyError

from hyperfleet.errors import StorageError, StorageOutageError
from hyperfleet.platform.clock import Clock, SystemClock
from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.controller.prepare import PreparedTrial, prepare
from hyperfleet.platform.controller.recovery import (
    adopt_donor_record,
    recover,
    requeue_phantoms_locked,
)
from hyperfleet.platform.controller.session import SweepSession, close_session
from hyperfleet.platform.launcher.base import Launcher, NoProcess, TrialHandle
from hyperfleet.platform.pool import Lease, LocalPool
from hyperfleet.platform.results import SweepSummary
from hyperfleet.platform.schedulers import Suggestion, TrialState
from hyperfleet.platform.storage import worker_identity
from hyperfleet.platform.storage.retry import retrying

logger = logging.getLogger(__name__)
T = TypeVar("T")


def finite(value: object) -> float | None:
    """``value`` as a finite float, or None (NaN, infinities, stored as strings or not)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


@dataclass
class Running:
    number: int
    handle: TrialHandle
    lease: Lease
    run_id: str
    lease_row: int | None = None  # its hf_leases row (None: rejected before launch)
    started: float = 0.0  # clock.monotonic() at launch, for trial.timeout


@dataclass(frozen=True)
class Progress:
    running: int
    finished: int
    budget: int | None


@dataclass(frozen=True)
class Timing:
    """How often the controller looks, heartbeats, and how long it waits for things."""

    poll_every: float = 0.1  # between loop iterations
    ask_every: float = 2.0  # after the scheduler had nothing, ask again after this (or an end)
    heartbeat_every: float = 5.0  # RUNNING trials' heartbeat in storage
    stale_after: float = 120.0  # a RUNNING trial silent this long has no live worker
    stop_grace: float = 10.0  # SIGTERM to SIGKILL when stopping trials


class Controller:
    """The sweep loop over injected parts (see the module docstring)."""

    def __init__(
        self,
        session: SweepSession,
        pool: LocalPool,
        launcher: Launcher,
        *,
        clock: Clock | None = None,
        timing: Timing | None = None,
        on_progress: Callable[[Progress], None] | None = None,
    ) -> None:
        self.session = session
        self.pool = pool
        self.launcher = launcher
        self.clock = clock or SystemClock()
        self.timing = timing or Timing()
        self.on_progress = on_progress
        self.running: dict[int, Running] = {}
        self.finished = 0
        self._stop = threading.Event()
        self._next_ask = 0.0  # the scheduler had nothing: ask again at this time, or sooner
        # when a trial ends (ends free devices, pauses and failures change what it can offer)

    @property
    def cfg(self) -> SweepConfig:
        return self.session.cfg

    def request_stop(self) -> None:
        """Stop running trials, requeue them, and end :meth:`run` (thread- and signal-safe)."""
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    # -- launching ------------------------------------------------------------------------

    def _devices(self) -> int:
        return max(1, self.cfg.trial.resources.devices)

    def _claim(self) -> Suggestion | None:
        """Ask the scheduler for a trial and record it RUNNING here, under the sweep's claim
        lock: any number of controllers keep the budget and never take one trial twice."""
        session = self.session
        with session.storage.claim_lock(session.name):
            s = session.scheduler.suggest()
            if s is not None:
                host, pid = worker_identity()
                now = self.clock.time()
                session.storage.upsert_trial(
                    session.name, s.trial_number, state="RUNNING", host=host, pid=pid,
                    heartbeat_at=now, started_at=now, ended_at=None, outcome=None, error=None,
                )  # fmt: skip
        return s

    def _launch_next(self) -> bool:
        """Start one trial if devices and a suggestion are there; False if not."""
        lease = self.pool.try_acquire(self._devices())
        if lease is None:
            return False
        try:
            suggestion = self._db(self._claim)
        except BaseException:
            self.pool.release(lease)
            raise
        if suggestion is None:
            self.pool.release(lease)
            self._next_ask = self.clock.monotonic() + self.timing.ask_every
            return False
        try:
            prepared = prepare(self.session, suggestion)
            if prepared.problems:  # a sampled combination that breaks a layout rule: FAIL
                self._reject(prepared, lease, "; ".join(prepared.problems))
            else:
                self.running[prepared.number] = self._start(prepared, lease)
        except BaseException:
            self._abandon(suggestion.trial_number, lease)
            raise
        return True

    def _abandon(self, number: int, lease: Lease) -> None:
        """A claimed trial that could not be launched goes back in the queue (best effort:
        what fails here is found again by recovery on the next start)."""
        logger.warning("trial %d could not be launched; it goes back in the queue", number)
        self.pool.release(lease)
        try:
            self.session.scheduler.requeue(number)
            self.session.storage.upsert_trial(self.session.name, number, state="WAITING")
        except Exception:
            logger.warning("could not requeue trial %d", number, exc_info=True)

    def _record_start(self, p: PreparedTrial, attempts: int) -> None:
        host, pid = worker_identity()
        now = self.clock.time()
        self.session.storage.upsert_trial(
            self.session.name,
            p.number,
            state="RUNNING",
            params=p.stored_params,
            host=host,
            pid=pid,
            heartbeat_at=now,
            started_at=now,
            ended_at=None,
            attempts=attempts,
            outcome=None,
            error=None,
            mlflow_run_id=p.spec.run_id,
            log_path=str(p.spec.log_path),
            trial_dir=p.spec.trial_dir,
        )

    def _reject(self, p: PreparedTrial, lease: Lease, error: str) -> None:
        logger.warning("trial %d rejected before launch: %s", p.number, error)
        self._record_start(p, attempts=0)
        rejected = self.running[p.number] = Running(
            p.number, NoProcess(), lease, p.spec.run_id or ""
        )
        self._finish(rejected, TrialState.FAIL, None, error)

    def _start(self, p: PreparedTrial, lease: Lease) -> Running:
        p.spec.write()
        adopt_donor_record(self.session, p.number, p.spec.restore)
        self._record_start(p, attempts=(p.prior.attempts if p.prior else 0) + 1)
        row = self.session.storage.open_lease(
            self.session.name, p.number, [str(d) for d in lease.devices]
        )
        logger.info("trial %d starts on %s", p.number, ", ".join(map(str, lease.devices)))
        try:
            handle = self.launcher.launch(p.spec, lease)
        except BaseException:
            self.session.storage.close_lease(row, "FAIL")
            raise
        return Running(p.number, handle, lease, p.spec.run_id or "", row, self.clock.monotonic())

    # -- reaping ---------------------------------------------------------------------------

    def _outcome(self, r: Running, code: int) -> tuple[TrialState | None, list[float] | None, str]:
        """The trial's end state (None: paused), objective values and error text."""
        rec = self.session.storage.get_trial(self.session.name, r.number)
        assert rec is not None
        if code != 0 or rec.outcome not in ("complete", "pruned", "paused"):
            return TrialState.FAIL, None, f"exit code {code}\n{r.handle.log_tail()}"
        if rec.outcome == "pruned":
            return TrialState.PRUNED, None, ""
        if rec.outcome == "paused":
            return None, None, ""
        objectives = self.cfg.all_objectives
        missing = [o.metric for o in objectives if o.metric not in rec.metrics]
        if missing:
            reported = ", ".join(sorted(rec.metrics)) or "none"
            return (
                TrialState.FAIL,
                None,
                f"objective metric {', '.join(missing)} not in the last report "
                f"(reported: {reported}); report it or fix objective.metric",
            )
        values = [finite(rec.metrics[o.metric]) for o in objectives]
        bad = [
            f"{o.metric} = {rec.metrics[o.metric]}"
            for o, v in zip(objectives, values, strict=True)
            if v is None
        ]
        if bad:
            return (
                TrialState.FAIL,
                None,
                f"objective {', '.join(bad)} at step {rec.last_step} is not a finite number; "
                f"the trial failed (check the workload for divergence)",
            )
        return TrialState.COMPLETE, [float(v) for v in values if v is not None], ""

    def _finish(
        self, r: Running, state: TrialState | None, values: list[float] | None, error: str
    ) -> None:
        """Record how the trial's processes ended and give its devices back."""
        scheduler = self.session.scheduler
        if state is None:  # paused: the scheduler resumes it later
            self._db(lambda: scheduler.on_trial_end(r.number, TrialState.COMPLETE))
            stored, tracked = "PAUSED", "WAITING"
        elif state is TrialState.WAITING:  # stopped by an interrupt
            self._db(lambda: scheduler.requeue(r.number))
            stored = tracked = "WAITING"
        else:
            self._db(lambda: scheduler.on_trial_end(r.number, state, values, error or None))
            stored = tracked = state.value
            self.finished += 1
        self.session.storage.upsert_trial(
            self.session.name, r.number, state=stored, ended_at=self.clock.time(),
            error=error or None,
        )  # fmt: skip
        metrics = [o.metric for o in self.cfg.all_objectives]
        final = dict(zip(metrics, values or [], strict=False))
        try:
            self.session.tracker.end_child(r.run_id, tracked, final, error)
        except Exception:
            logger.warning("could not end MLflow run of trial %d", r.number, exc_info=True)
        if r.lease_row is not None:
            self.session.storage.close_lease(r.lease_row, stored)
        self.pool.release(r.lease)
        del self.running[r.number]
        self._next_ask = 0.0
        logger.info("trial %d ended %s %s", r.number, stored, values or "")

    def _reap(self) -> None:
        for r in list(self.running.values()):
            code = r.handle.poll()
            if code is not None:
                self._finish(r, *self._outcome(r, code))

    def _enforce_trial_timeout(self) -> None:
        """A launch running longer than ``trial.timeout`` is stopped and FAIL."""
        limit = self.cfg.trial.timeout
        if limit is None:
            return
        for r in list(self.running.values()):
            if self.clock.monotonic() - r.started > limit and r.handle.poll() is None:
                logger.warning("trial %d timed out after %g s; stopping it", r.number, limit)
                r.handle.stop(self.timing.stop_grace)
                self._finish(
                    r, TrialState.FAIL, None, f"timed out after {limit:g} s (trial.timeout)"
                )

    def _stop_all(self) -> None:
        """Stop every running trial; those that didn't finish go back in the queue. Their
        processes end even when their records can't be written (a storage outage): then the
        next start finds them stale and requeues them."""
        for r in list(self.running.values()):
            code = r.handle.poll()
            if code is None:
                r.handle.stop(self.timing.stop_grace)
            try:
                if code is None:
                    self._finish(r, TrialState.WAITING, None, "")
                else:
                    self._finish(r, *self._outcome(r, code))
            except (StorageError, SQLAlchemyError):
                logger.warning("trial %d stopped; its record could not be written", r.number)
                self.pool.release(r.lease)
                del self.running[r.number]

    # -- the loop --------------------------------------------------------------------------

    def _heartbeat(self) -> None:
        now = self.clock.time()
        for number in list(self.running):
            self.session.storage.upsert_trial(self.session.name, number, heartbeat_at=now)

    def _fill(self, timed_out: bool) -> bool:
        """Launch trials while there is room; False when the scheduler had nothing."""
        while not timed_out and not self._stop.is_set():
            if len(self.running) >= self.cfg.budget.max_concurrent:
                return True
            if self.pool.free < self._devices():
                return True
            if self.clock.monotonic() < self._next_ask or not self._launch_next():
                return False
        return True

    def budget(self) -> int | None:
        if self.cfg.is_population:
            return int(self.cfg.scheduler.population)
        return self.cfg.budget.trials

    def _db(self, fn: Callable[[], T]) -> T:
        """``fn()`` (scheduler or storage work), riding out a storage outage (:mod:`retry`)."""
        return retrying(fn, self.session.storage.retry_s)

    def _over(self, more: bool, timed_out: bool) -> bool:
        """Nothing runs here and nothing more will: the scheduler has nothing, or time is up.
        A phantom trial (claimed by a process that died) found now is requeued instead."""
        if self.running:
            return False
        if more and not timed_out and not self.session.scheduler.finished():
            return False
        if not timed_out and self._db(lambda: requeue_phantoms_locked(self.session)):
            self._next_ask = 0.0
            return False
        return True

    def _loop(self) -> None:
        timeout = self.cfg.budget.timeout
        start = last_beat = self.clock.monotonic()
        while not self._stop.is_set():
            self._reap()
            self._enforce_trial_timeout()
            timed_out = timeout is not None and self.clock.monotonic() - start > timeout
            if timed_out and self.cfg.budget.stop_at_timeout and self.running:
                logger.warning("budget.timeout reached: stopping the running trials")
                self._stop_all()
            if self._over(self._fill(timed_out), timed_out):
                return
            if self.clock.monotonic() - last_beat > self.timing.heartbeat_every:
                self._db(self._heartbeat)
                last_beat = self.clock.monotonic()
            if self.on_progress is not None:
                self.on_progress(Progress(len(self.running), self.finished, self.budget()))
            self.clock.wait(self._stop, self.timing.poll_every)

    def run(self) -> SweepSummary:
        """Run the sweep to its end (or until stopped); its summary. A storage outage longer
        than the retry period stops every trial and raises ``StorageOutageError``."""
        self._db(lambda: recover(self.session, self.timing.stale_after))
        try:
            self._loop()
        except StorageOutageError:
            self.session.storage.retry_s = 0.0  # the outage lasted: clean up without waiting
            raise
        finally:
            self._stop_all()
            self.launcher.close()
        return close_session(self.session, interrupted=self._stop.is_set())
