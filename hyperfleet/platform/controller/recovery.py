"""Recovery: trials whose processes are gone go back in the queue, with their records intact.

A trial left RUNNING by a controller or worker that died (its pid is gone on this host, or its
heartbeat, stamped by its worker and by its own reports, is older than ``stale_after``) is
requeued (atomically: only if it has not beaten or reported since it was found stale): the
scheduler puts it back in its queue with its params, and the next launch resumes it from its
latest checkpoint as the same trial and MLflow run. A worker never judges its own trials.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from hyperfleet.platform.controller.session import SweepSession
from hyperfleet.platform.launcher.base import TrialHandle
from hyperfleet.platform.schedulers import TrialState
from hyperfleet.spec.wire import RestorePoint

logger = logging.getLogger(__name__)


def requeue_stale(
    session: SweepSession, stale_after: float, worker: str | None = None
) -> list[int]:
    """Requeue the sweep's stale RUNNING trials (their worker is gone and they are silent);
    their numbers. A trial that lost its worker more than ``budget.max_retries`` times is FAIL
    instead. ``worker``'s own trials are never judged: it watches over their processes
    itself, and after a pause of its own its heartbeats are what is stale, not they."""
    requeued = []
    limit = session.cfg.budget.max_retries
    for t in session.storage.stale.running(session.name, stale_after):
        if worker is not None and t.worker == worker:
            continue
        stopped = was_stopped(t.trial_dir)  # stopped by its controller, not lost: no retry
        if t.retries >= limit and not stopped:
            session.storage.leases.close_open(session.name, t.number, TrialState.LOST)
            error = f"lost its worker {t.retries + 1} times (budget.max_retries: {limit})"
            logger.warning("trial %d %s; it fails", t.number, error)
            session.scheduler.on_trial_end(t.number, TrialState.FAIL, None, error)
            session.storage.trials.upsert(
                session.name, t.number, state=TrialState.FAIL, error=error
            )
            continue
        if not session.storage.stale.take_over(t, retry=not stopped):  # it beat or reported since
            continue
        session.storage.leases.close_open(session.name, t.number, TrialState.LOST)
        if stopped:
            logger.warning("trial %d was stopped while storage was unwritable; requeued", t.number)
        else:
            logger.warning("trial %d was left RUNNING by a lost worker; requeued", t.number)
        session.scheduler.requeue(t.number)
        requeued.append(t.number)
    return requeued


def requeue_unclaimed(session: SweepSession, worker: str | None, number: int) -> bool:
    """Requeue trial ``number``, RUNNING under ``worker`` at its last heartbeat though none of
    its claims was answered with it: a claim whose commit's answer was lost (the connection
    dropped as it committed), then retried, took another trial, and this one would stay
    RUNNING, stamped by the worker's own heartbeats, and never run. No retry is counted (it
    never ran). Only if it is still RUNNING under ``worker`` as read; whether it was."""
    t = session.storage.trials.get(session.name, number)
    if t is None or t.state != TrialState.RUNNING or t.worker != worker:
        return False
    if not session.storage.stale.take_over(t, retry=False):  # beaten meanwhile: at the next look
        return False
    logger.warning(
        "trial %d was recorded RUNNING here by a claim whose answer was lost; requeued", number
    )
    session.scheduler.requeue(number)
    return True


STOPPED = ".stopped"  # in a trial's folder: its controller stopped it but could not say so


def mark_stopped(handle: TrialHandle) -> None:
    """Note in the trial's folder (beside its log) that its controller stopped it while its
    record could not be written (a storage outage, a full disk): recovery requeues it then
    without counting a retry (:func:`was_stopped`)."""
    log_path = handle.log_path
    if log_path is not None:
        with contextlib.suppress(OSError):
            (Path(log_path).parent / STOPPED).touch()


def was_stopped(trial_dir: str | None) -> bool:
    """Whether :func:`mark_stopped` noted this trial (the note is taken away)."""
    if not trial_dir:
        return False
    try:
        (Path(trial_dir) / STOPPED).unlink()
    except OSError:
        return False
    return True


def requeue_phantoms(session: SweepSession) -> list[int]:
    """Trials the scheduler thinks are running but that have no record (RUNNING, or made
    ahead): the process that asked for them died between the two (the claim lock, held by the
    caller, keeps live controllers out of that window). They go back in the queue and are
    reused, so the budget counts only trials that exist."""
    phantoms = sorted(_phantoms(session))
    for number in phantoms:
        logger.warning(
            "trial %d was suggested but never launched (its controller died in between); "
            "it goes back in the queue", number,
        )  # fmt: skip
        session.scheduler.requeue(number)
    return phantoms


def _may_have_phantoms(session: SweepSession) -> bool:
    """A look without the lock: the scheduler hands out a trial that has no RUNNING record.
    A phantom stays one until it is requeued (its claimer is dead), so a look that finds none
    is right; a claim in flight looks like one, and the caller takes the lock to be sure.
    The trials are counted first (two counts by the database), and the running ones'
    numbers are read only when the scheduler runs more than have a record: a fleet's idle
    workers look every few seconds at a sweep's end, and each read every running trial
    (1,000 workers: most of their CPU). A record whose trial the scheduler no
    longer runs (its end told, its record not yet written; a worker that died in between,
    until its trial is found stale) can hide a phantom from the counts until it is written
    or requeued; the next look finds it."""
    running = session.scheduler.running_count()
    if running <= session.storage.ahead.recorded_count(session.name):
        return False
    return bool(_phantoms(session))


def _phantoms(session: SweepSession) -> set[int]:
    """Running in the scheduler's eyes, with no record; the scheduler asked again after the
    records were read: a trial that ended in between (its end told to the scheduler, then its
    record) is not running any more, and is not one."""
    suspects = session.scheduler.running() - _recorded(session)
    if suspects:
        suspects &= session.scheduler.running()
    return suspects


def _recorded(session: SweepSession) -> set[int]:
    """The trials that have a record: RUNNING under a worker, or made ahead for the next
    claim (:mod:`hyperfleet.platform.storage.ahead`: whichever worker takes it claims it),
    read after the scheduler's running ones and in one snapshot (a take runs without the
    claim lock)."""
    return session.storage.ahead.recorded(session.name)


def requeue_phantoms_locked(session: SweepSession) -> list[int]:
    """:func:`requeue_phantoms` under the sweep's claim lock, taken only when a look without
    it finds one (:func:`_may_have_phantoms`): every worker of a fleet looks once when its
    sweep seems over, and a thousand of them queued on the lock, each reading the history."""
    if not _may_have_phantoms(session):
        return []
    with session.storage.claim_lock(session.name):
        return requeue_phantoms(session)


def recover(
    session: SweepSession, stale_after: float, worker: str | None = None, always: bool = True
) -> int:
    """Requeue stale and phantom trials, under the sweep's claim lock; how many. The lock is
    taken only when a look without it finds a trial of another worker stale or (``always``:
    a worker's first look) may find a phantom (:func:`_may_have_phantoms`: two counts): a
    stale trial stays so until it is requeued or beats, so a look that finds none is right,
    and a fleet's looks cost one short query each instead of a queue on the lock (1,000
    workers starting together each took it). Phantoms are otherwise found when a sweep seems
    to be over (:func:`requeue_phantoms_locked`) or by a look that takes the lock.

    A look that finds a stale trial (and, at a worker's first look, no phantom) takes the
    lock only if it is free now: a lost worker's trials go stale for every worker of the
    fleet at once, and each queued on the lock behind the first, which requeued them, to
    find nothing (claims that needed the lock waited behind them all; 1,000 simulated
    workers joining while some were taken for lost spent minutes in their first look
    before their first claim). A look that finds the lock held does nothing; the trial is
    still stale at the next look if no holder requeued it."""
    seen = session.storage.stale.running(session.name, stale_after)
    stale = any(worker is None or t.worker != worker for t in seen)
    if always and _may_have_phantoms(session):
        with session.storage.claim_lock(session.name):
            return _requeue_locked(session, stale_after, worker)
    if not stale:
        return 0
    with session.storage.try_claim_lock(session.name) as free:
        return _requeue_locked(session, stale_after, worker) if free else 0


def _requeue_locked(session: SweepSession, stale_after: float, worker: str | None) -> int:
    """:func:`requeue_stale` and :func:`requeue_phantoms`, the claim lock held; how many. The
    running trials are read for phantoms only when the counts say there may be one."""
    stale = len(requeue_stale(session, stale_after, worker))
    return stale + (len(requeue_phantoms(session)) if _may_have_phantoms(session) else 0)


def adopt_donor_record(session: SweepSession, number: int, restore: RestorePoint | None) -> None:
    """A trial resuming from another trial's checkpoint (a PBT member whose weights are a
    donor's) starts at that step with what the donor reported there; if that is already its
    step budget, no later report will set it."""
    if restore is None or restore.trial == number or restore.step is None:
        return
    donor = session.storage.trials.get(session.name, restore.trial)
    if donor is not None and donor.last_step == restore.step:
        session.storage.trials.upsert(
            session.name, number, last_step=restore.step, metrics=dict(donor.metrics)
        )
