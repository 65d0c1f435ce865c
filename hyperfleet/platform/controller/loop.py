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
import threading
from collections.abc import Callable
from dataclasses import dataclass

from hyperfleet.platform.clock import Clock, SystemClock
from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.controller.prepare import PreparedTrial, prepare
from hyperfleet.platform.controller.recovery import adopt_donor_record, requeue_stale
from hyperfleet.platform.controller.session import SweepSession, close_session
from hyperfleet.platform.launcher.base import Launcher, NoProcess, TrialHandle
from hyperfleet.platform.pool import Lease, LocalPool
from hyperfleet.platform.results import SweepSummary
from hyperfleet.platform.schedulers import TrialState
from hyperfleet.platform.storage import worker_identity

logger = logging.getLogger(__name__)


@dataclass
class Running:
    number: int
    handle: TrialHandle
    lease: Lease
    run_id: str
    lease_row: int | None = None  # its hf_leases row (None: rejected before launch)


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

    def _launch_next(self) -> bool:
        """Start one trial if devices and a suggestion are there; False if not."""
        lease = self.pool.try_acquire(self._devices())
        if lease is None:
            return False
        try:
            suggestion = self.session.scheduler.suggest()
            prepared = None if suggestion is None else prepare(self.session, suggestion)
        except BaseException:
            self.pool.release(lease)
            raise
        if prepared is None:
            self.pool.release(lease)
            self._next_ask = self.clock.monotonic() + self.timing.ask_every
            return False
        if prepared.problems:  # a sampled combination that breaks a layout rule never launches
            self._reject(prepared, lease, "; ".join(prepared.problems))
            return True
        handle = self._start(prepared, lease)
        row = self.session.storage.open_lease(
            self.session.name, prepared.number, [str(d) for d in lease.devices]
        )
        self.running[prepared.number] = Running(
            prepared.number, handle, lease, prepared.spec.run_id or "", row
        )
        return True

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

    def _start(self, p: PreparedTrial, lease: Lease) -> TrialHandle:
        p.spec.write()
        adopt_donor_record(self.session, p.number, p.spec.restore)
        self._record_start(p, attempts=(p.prior.attempts if p.prior else 0) + 1)
        logger.info("trial %d starts on %s", p.number, ", ".join(map(str, lease.devices)))
        return self.launcher.launch(p.spec, lease)

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
        return TrialState.COMPLETE, [float(rec.metrics[o.metric]) for o in objectives], ""

    def _finish(
        self, r: Running, state: TrialState | None, values: list[float] | None, error: str
    ) -> None:
        """Record how the trial's processes ended and give its devices back."""
        scheduler = self.session.scheduler
        if state is None:  # paused: the scheduler resumes it later
            scheduler.on_trial_end(r.number, TrialState.COMPLETE)
            stored, tracked = "PAUSED", "WAITING"
        elif state is TrialState.WAITING:  # stopped by an interrupt
            scheduler.requeue(r.number)
            stored = tracked = "WAITING"
        else:
            scheduler.on_trial_end(r.number, state, values, error or None)
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

    def _stop_all(self) -> None:
        """Stop every running trial; those that didn't finish go back in the queue."""
        for r in list(self.running.values()):
            code = r.handle.poll()
            if code is None:
                r.handle.stop(self.timing.stop_grace)
                self._finish(r, TrialState.WAITING, None, "")
            else:
                self._finish(r, *self._outcome(r, code))

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

    def _pause(self) -> None:
        """Until the next iteration: ``poll_every``, or less when the launcher can tell that a
        trial's process has something to say (its ``wait(timeout)``): a trial that ended is
        then reaped, and its devices given to the next one, at once instead of a tick later."""
        wait = getattr(self.launcher, "wait", None)
        if wait is None or not self.running or self._stop.is_set():
            self.clock.wait(self._stop, self.timing.poll_every)
        else:
            wait(self.timing.poll_every)

    def budget(self) -> int | None:
        if self.cfg.is_population:
            return int(self.cfg.scheduler.population)
        return self.cfg.budget.trials

    def run(self) -> SweepSummary:
        """Run the sweep to its end (or until stopped); its summary."""
        requeue_stale(self.session, self.timing.stale_after)
        timeout = self.cfg.budget.timeout
        start = self.clock.monotonic()
        last_beat = start
        try:
            while not self._stop.is_set():
                self._reap()
                timed_out = timeout is not None and self.clock.monotonic() - start > timeout
                more = self._fill(timed_out)
                scheduler = self.session.scheduler
                if not self.running and (not more or timed_out or scheduler.finished()):
                    break
                if self.clock.monotonic() - last_beat > self.timing.heartbeat_every:
                    self._heartbeat()
                    last_beat = self.clock.monotonic()
                if self.on_progress is not None:
                    self.on_progress(Progress(len(self.running), self.finished, self.budget()))
                self._pause()
        finally:
            self._stop_all()
            self.launcher.close()
        return close_session(self.session, interrupted=self._stop.is_set())
