"""The controller: the loop of a worker — fill its devices with trials, reap them, repeat.

A controller serves the sweeps its :class:`SweepSource` yields (the one of ``sweep run``, the
named ones of ``hyperfleet worker --sweep``, or every active sweep in the storage), one
:class:`~.driver.SweepDriver` each, in order of ``budget.priority`` then age: each tick it reaps
ended trials, stops trials past ``trial.timeout``, and launches trials while its devices are
free and a sweep has work (claims are exact across workers: :mod:`.driver`). Every few seconds
it heartbeats itself and its trials, looks for new sweeps, leaves those a user paused or
stopped (:mod:`.lifecycle`) and requeues trials of workers that went silent (:mod:`.recovery`),
so any worker resumes them from their checkpoints.

A sweep's driver closes when the sweep is over here and no trial of it runs anywhere (the last
controller marks it ``done``). The controller ends when told to (``until_done``: its sweeps are
done; ``exit_when_idle``: nothing to run here and no trial of its sweeps running elsewhere to
watch over; ``max_trials``) or stopped (SIGINT/SIGTERM: its running trials are stopped and
requeued, not failed, and its devices released — a drain). Elastic trials: :mod:`.resizing`.

Its parts are injected — the sweeps (with their schedulers and storage), the device pool, the
launchers, the clock — so the same loop runs torchrun trials, in-process trials and simulated
trials on a virtual clock; it never asks which.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
from collections.abc import Callable

from hyperfleet import startup
from hyperfleet.errors import StorageOutageError
from hyperfleet.platform.clock import Clock, SystemClock
from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.controller.driver import SweepDriver
from hyperfleet.platform.controller.heartbeat import Heartbeat
from hyperfleet.platform.controller.lifecycle import Halts
from hyperfleet.platform.controller.pace import LOOKERS, Timing, paced
from hyperfleet.platform.controller.recovery import recover
from hyperfleet.platform.controller.resizing import ElasticKnobs, Resizer
from hyperfleet.platform.controller.session import SweepSession, leave_session
from hyperfleet.platform.controller.sources import Progress, SweepSource, Until
from hyperfleet.platform.diskspace import disk_full_error, full_path
from hyperfleet.platform.launcher.base import Launcher
from hyperfleet.platform.pool import LocalPool
from hyperfleet.platform.storage import Storage, WorkerRecord
from hyperfleet.platform.storage.results import SweepSummary

logger = logging.getLogger(__name__)

__all__ = ["Controller"]


class Controller:
    """The loop of a worker (see the module docstring)."""

    def __init__(
        self,
        pool: LocalPool,
        sweeps: SweepSource,
        launcher_for: Callable[[SweepConfig], Launcher],
        *,
        clock: Clock | None = None,
        timing: Timing | None = None,
        worker: WorkerRecord | None = None,
        registry: Storage | None = None,
        until: Until | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        counts_only: bool = False,
        elastic: ElasticKnobs | None = None,
    ) -> None:
        """``counts_only``: a sweep it leaves that runs elsewhere or that another worker ended
        is summarised by its counts, not read whole (:func:`.session.close_session`)."""
        self.pool = pool
        self.sweeps = sweeps
        self.launcher_for = launcher_for
        self.clock = clock or SystemClock()
        self.timing = timing or Timing()
        self.worker = worker
        self.registry = registry  # where the worker registers and heartbeats
        self._share = 1.0  # live workers over LOOKERS, at least 1 (:meth:`_recovery_every`)
        self.until = until or Until()
        self.on_progress = on_progress
        self.counts_only = counts_only
        self.drivers: dict[str, SweepDriver] = {}
        self.summaries: dict[str, SweepSummary] = {}
        self._started: dict[str, float] = {}
        self._launchers: list[Launcher] = []
        self._stop = threading.Event()
        self._idle_since = 0.0
        self._look_again: dict[str, float] = {}  # sweep -> when _close_over looks at it again
        self._beat: Heartbeat | None = None
        self._halts = Halts(sweeps.catalog, self.timing.rescan_every)  # paused or stopped
        self.resizer = Resizer(elastic)  # elastic trials resized, pool-wide (:mod:`.resizing`)

    def request_stop(self) -> None:
        """Drain: stop running trials, requeue them, and end :meth:`run` (thread- and
        signal-safe)."""
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    @property
    def running(self) -> int:
        """Launches of this worker in flight (trials it leads or runs, nodes of others')."""
        return sum(len(d.running) + len(d.gangs.members) for d in self.drivers.values())

    # -- sweeps ---------------------------------------------------------------------------

    def _add(self, session: SweepSession) -> None:
        launcher = self.launcher_for(session.cfg)
        if launcher not in self._launchers:
            self._launchers.append(launcher)
        worker = self.worker.id if self.worker else None
        address = self.worker.address if self.worker else None
        self.drivers[session.name] = SweepDriver(
            session, launcher, self.clock, worker, address, timing=self.timing,
            stopping=self._stop.is_set,
        )  # fmt: skip
        self.drivers[session.name].pace = self._share
        self._started[session.name] = self.clock.monotonic()
        logger.info("serving sweep %s", session.name)
        self._follow_storage_retry()

    def _follow_storage_retry(self) -> None:
        """The worker's own storage (registry, catalog) waits out an outage as long as the
        sweeps it serves do (their ``storage_retry``; the longest of them), not longer."""
        retry = max(d.session.storage.retry_s for d in self.drivers.values())
        for storage in (self.registry, self.sweeps.catalog):
            if storage is not None:
                storage.retry_s = retry

    def _ordered(self) -> list[SweepDriver]:
        return sorted(
            self.drivers.values(),
            key=lambda d: (-d.cfg.budget.priority, d.session.created_at, d.name),
        )

    def _rescan(self) -> None:
        """Sweeps a user paused or stopped left, new sweeps to serve, open gangs to join."""
        now = self.clock.monotonic()
        self.summaries.update(self._halts.leave(self.drivers, self.counts_only, now, self._share))
        for session in self.sweeps.sessions(set(self.drivers)):
            self._add(session)
        for d in self._ordered():
            if not self._stop.is_set():
                d.gangs.join_open(self.pool)

    def _recover(self, always: bool = True) -> None:
        """Requeue the trials of workers that went silent (every few heartbeats; not
        ``always``: only when one looks stale, :func:`.recovery.recover`). This worker
        beats first, and stops its copies of trials another worker took over meanwhile (no
        retry counted): one that was paused itself (SIGSTOP, a long stall) judges with a
        fresh heartbeat of its own, and keeps its trials that are still its own."""
        if self._beat is not None:
            try:  # a heartbeat that began within the interval is fresh: no second one
                self._beat.beat_now(unless_within=self.timing.heartbeat_every)
            except Exception:  # unreachable storage: judge no one now
                logger.warning("worker heartbeat failed; recovery waits", exc_info=True)
                return
            self._fence()
        me = self.worker.id if self.worker else None
        for d in self._ordered():
            look = functools.partial(recover, d.session, self.timing.stale_after, me, always)
            if d._db(look):
                d.ask_now()  # requeued trials wait: not "nothing to run" any more

    def _recovery_every(self) -> float:
        """Seconds to this worker's next look for stale trials: ``stale_after / 3``, and in a
        fleet of more than :data:`LOOKERS` live workers that times its share of them, at a
        random phase, so the fleet looks about ``LOOKERS`` times per ``stale_after / 3``
        whatever its size. A lost worker's trials are found as soon (some worker looks every
        ``stale_after / 3 / LOOKERS`` seconds) while a thousand workers no longer look 100
        times a second: at 1,000 simulated workers on 2 cores those looks and the heartbeats
        were most of the workers' CPU."""
        every = self.timing.stale_after / 3
        if self.registry is None:
            return every
        try:
            live = self.registry.workers.count_live(self.timing.stale_after)
        except Exception:  # noqa: BLE001 - unreachable storage: look at the usual pace
            return every
        self._share = max(1.0, live / LOOKERS)
        for d in self.drivers.values():
            d.pace = self._share  # its idle asks and looks too (:func:`.pace.paced`)
        return paced(every, self._share)

    def _timed_out(self, d: SweepDriver) -> bool:
        timeout = d.cfg.budget.timeout
        return timeout is not None and self.clock.monotonic() - self._started[d.name] > timeout

    def _close_over(self) -> None:
        """Close the drivers whose sweep is over here and runs nowhere else. A sweep over here
        whose trials still run elsewhere is looked at again after ``ask_every``, not every tick:
        a fleet's idle workers would otherwise query the database ten times a second each."""
        now = self.clock.monotonic()
        for d in list(self.drivers.values()):
            if now < self._look_again.get(d.name, 0.0) or not d.over(self._timed_out(d)):
                continue
            busy = d._db(
                functools.partial(d.session.storage.trials.running_elsewhere, d.name, None)
            )
            if busy and not self._timed_out(d):
                # other workers still run its trials: stay, to take over if they die
                self._look_again[d.name] = now + paced(self.timing.ask_every, self._share)
                continue
            self.summaries[d.name] = d.close(False, self.counts_only)
            del self.drivers[d.name]

    # -- one tick ---------------------------------------------------------------------------

    def _launched(self) -> int:
        return sum(d.launched for d in self.drivers.values())

    def _fill(self) -> None:
        """Launch trials, higher-priority sweeps first, while devices are free."""
        limit = self.until.max_trials
        for d in self._ordered():
            if self._timed_out(d):
                continue
            while not self._stop.is_set() and (limit is None or self._launched() < limit):
                if not d.try_launch(self.pool):
                    break

    def _tick(self) -> None:
        for d in self._ordered():
            d.reap()
            d.enforce_trial_timeout()
            if self._timed_out(d) and d.cfg.budget.stop_at_timeout and d.running:
                logger.warning("sweep %s: budget.timeout reached; stopping its trials", d.name)
                d.stop_all()
        self._fill()
        self.resizer.tick(self._ordered(), self.pool, self.clock.monotonic())  # after launches
        for d in self._ordered():
            if not self._stop.is_set() and not self._timed_out(d):
                d.refill_ahead()  # between launches: at most every TOP_UP_EVERY_S
        self._close_over()

    def _watching(self) -> bool:
        """Trials of its sweeps run on other workers: it takes them over if their worker goes
        silent, so it is not idle (else a fleet of idle-exiting workers could all leave
        before a lost worker's trials are found stale, stranding them)."""
        me = self.worker.id if self.worker else None
        return any(
            d._db(functools.partial(d.session.storage.trials.running_elsewhere, d.name, me))
            for d in self.drivers.values()
        )

    def _should_end(self) -> bool:
        if self.running:
            self._idle_since = self.clock.monotonic()
            return False
        if self.until.max_trials is not None and self._launched() >= self.until.max_trials:
            return True
        if self.until.idle is not None:
            if self._watching():
                self._idle_since = self.clock.monotonic()
                return False
            return self.clock.monotonic() - self._idle_since > self.until.idle
        return bool(self.until.done and not self.drivers and not self._halts.parked)

    def _heartbeat(self) -> None:
        """Without a heartbeat thread (simulated sweeps): stamp the trials from the loop."""
        if self._beat is None:
            for d in self.drivers.values():
                d._db(d.heartbeat)

    def _fence(self) -> None:
        """Stop local copies of trials that another worker requeued meanwhile."""
        if self._beat is None:
            return
        owned, taken = self._beat.owned()
        if owned is not None:
            for d in self.drivers.values():
                d.fence(owned, taken)

    def _progress(self) -> None:
        if self.on_progress is not None:
            drivers = self.drivers.values()
            finished = sum(d.finished for d in drivers)
            self.on_progress(Progress.of([d.cfg for d in drivers], self.running, finished))

    def _wait(self) -> None:
        """Until the next tick: ``poll_every``, or sooner when the launcher says a trial's
        process has something to say (its ``wait(timeout)``: an ended trial is reaped at once
        instead of on the next tick). A launcher that cannot tell (``wait`` returns False at
        once), or several launchers, and the controller waits on its clock. A launcher that
        knows when its trials next report or end (``next_event_in``: simulated ones) lets the
        controller sleep until then (:meth:`_until_event`)."""
        launchers, busy = self._launchers, self.running and not self._stop.is_set()
        if busy and len(launchers) == 1:
            due = launchers[0].next_event_in()
            if due is not None:
                self.clock.wait(self._stop, self._until_event(due))
                return
            if launchers[0].wait(self.timing.poll_every):
                return
        self.clock.wait(self._stop, self.timing.poll_every if busy else self._idle_pause())

    def _until_event(self, due: float) -> float:
        """How long to sleep when the next trial event is ``due`` seconds away: no longer than
        an idle worker would (a free device may be filled at its sweep's next ask; new
        sweeps, stale trials and heartbeats keep their own times), and no longer than
        ``ask_every / 2`` with every device busy."""
        cap = self._idle_pause() if self.pool.free else self.timing.ask_every / 2
        return min(due, cap)

    def _idle_pause(self) -> float:
        """Nothing runs here: no tick has anything to do before a sweep may be asked again
        (its scheduler had nothing: ``ask_every``), so wait until then, up to half of
        ``ask_every`` (new sweeps, stale trials and heartbeats keep their own times); a
        fleet's idle workers then tick once a second, not ten times."""
        now, timing = self.clock.monotonic(), self.timing
        asks = [d.asks_at for d in self.drivers.values()]
        until = min(asks) - now if asks else timing.ask_every
        return max(timing.poll_every, min(until, timing.ask_every / 2))

    def _register(self) -> None:
        """Announce the worker (once its sweeps are open: registered means ready to take
        trials) and start its heartbeat."""
        if self.worker is None or self.registry is None:
            return
        now = self.clock.time()
        self.registry.workers.register(
            dataclasses.replace(self.worker, started_at=now, heartbeat_at=now)
        )
        self._beat = Heartbeat(self.registry.url, self.worker.id, self.timing.heartbeat_every)
        self._beat.start()

    def _loop(self) -> None:
        self._rescan()
        self._register()
        self._recover()
        startup.resume()  # the sweeps are open: MLflow, Optuna and the schedulers imported
        last_beat = last_scan = self._idle_since = self.clock.monotonic()
        next_recovery = last_beat + self.timing.stale_after / 3
        while not self._stop.is_set():
            self._fence()
            self._tick()
            if self._should_end():
                return
            now = self.clock.monotonic()
            if now - last_beat >= self.timing.heartbeat_every:
                self._heartbeat()
                last_beat = now
            if now - last_scan >= self.timing.rescan_every:
                self._rescan()
                last_scan = now
            if now >= next_recovery:
                self._recover(always=False)
                next_recovery = now + self._recovery_every()
            self._progress()
            self._wait()

    def run(self) -> dict[str, SweepSummary]:
        """Serve sweeps until told to end (see the module docstring); the summaries of the
        sweeps closed meanwhile. A storage outage longer than the retry period stops every
        trial and raises ``StorageOutageError``; a full disk requeues them and raises
        ``DiskFullError`` (:mod:`hyperfleet.platform.diskspace`)."""
        ended = False
        try:
            self._loop()
            ended = True
        except StorageOutageError:
            for d in self.drivers.values():  # the outage lasted: clean up without waiting
                d.session.storage.retry_s = 0.0
            raise
        except Exception as exc:
            full = full_path(exc)
            if full is None:
                raise
            for d in self.drivers.values():  # requeue what runs; write nothing more
                d.session.storage.retry_s = 0.0
            raise disk_full_error(full) from exc
        finally:
            self._shutdown(failed=not ended)
        return self.summaries

    def _shutdown(self, failed: bool = False) -> None:
        """Stop what runs here and close the sweeps. ``failed``: the loop ended on an error,
        which ends no sweep: each is left as it stands (its trials requeued), for this or
        another worker to go on with; a sweep is done only when its budget is reached or a
        user ends it."""
        interrupted = self._stop.is_set()
        for d in list(self.drivers.values()):
            d.stop_all()
        for launcher in self._launchers:
            launcher.close()
        for d in list(self.drivers.values()):
            if d.session.storage.retry_s <= 0:  # an outage, a full disk: write nothing more
                pass
            elif failed:
                leave_session(d.session)
            else:
                self.summaries[d.name] = d.close(interrupted, self.counts_only)
            del self.drivers[d.name]
        if self._beat is not None:
            self._beat.stop()
