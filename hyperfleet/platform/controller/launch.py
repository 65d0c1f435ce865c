"""A claimed trial's launch: recorded RUNNING here with its attempt and lease, then started.

The record and the lease are written in one transaction under the trial's row lock, and only
while the trial is still this worker's claim (:meth:`.TrialStore.launch_attempt`): the new attempt
number fences off every earlier copy's writes, and a worker that stalled between its claim
and its launch (the trial requeued and taken meanwhile) starts no second copy
(``Superseded``). The spec is then written with its attempt, a trial across hosts opens its
gang as node 0 (:mod:`.gangs`), and the launcher starts its processes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from hyperfleet.platform.controller.gangs import Gangs, SweepSeat
from hyperfleet.platform.controller.prepare import PreparedTrial
from hyperfleet.platform.controller.recovery import adopt_donor_record
from hyperfleet.platform.launcher.base import TrialHandle
from hyperfleet.platform.pool import Lease, LocalPool
from hyperfleet.platform.storage import worker_identity
from hyperfleet.spec.states import TrialState

logger = logging.getLogger(__name__)


@dataclass
class Running:
    number: int
    handle: TrialHandle
    lease: Lease
    pool: LocalPool  # where the lease goes back to
    run_id: str
    lease_row: int | None = None  # its hf_leases row (None: rejected before launch)
    started: float = 0.0  # clock.monotonic() at launch, for trial.timeout
    gang: int | None = None  # the hf_gangs row it leads (a trial that spans hosts)
    launched_at: float = 0.0  # clock.time() at launch (fencing compares heartbeats with it)
    attempt: int = 0  # its attempt number (hf_trials.attempts when it was launched)
    from_step: int | None = None  # its last reported step when launched (None: none yet)


def started_fields(p: PreparedTrial, worker: str | None, now: float) -> dict[str, Any]:
    """The trial's record as it starts here: RUNNING under ``worker``."""
    host, pid = worker_identity()
    return dict(
        state=TrialState.RUNNING, params=p.stored_params, host=host, pid=pid,
        worker=worker, heartbeat_at=now, ended_at=None,
        outcome=None, mlflow_run_id=p.spec.run_id,
        log_path=str(p.spec.log_path), trial_dir=p.spec.trial_dir,
    )  # fmt: skip


def record_launch(seat: SweepSeat, p: PreparedTrial, lease: Lease) -> tuple[int, int]:
    """Record the trial RUNNING here with its next attempt number and its lease of the
    devices, only while the trial is still this worker's claim (else ``Superseded``); the
    attempt and the lease row."""
    devices = [str(d) for d in lease.devices]
    fields = started_fields(p, seat.worker, seat.clock.time())
    return seat.session.storage.trials.launch_attempt(
        seat.session.name, p.number, devices, lease.share, lease.per_device, **fields
    )


def start(
    seat: SweepSeat, gangs: Gangs, p: PreparedTrial, lease: Lease, pool: LocalPool
) -> Running:
    """Launch the claimed trial ``p`` on ``lease`` (taken from ``pool``): recorded, its spec
    written, its gang opened when it spans hosts, its processes started."""
    adopt_donor_record(seat.session, p.number, p.spec.restore)
    attempt, row = record_launch(seat, p, lease)
    ranks = len(lease.devices) * seat.session.cfg.trial.resources.nodes
    spec = p.spec.model_copy(update={"attempt": attempt, "world_size": max(1, ranks)})
    spec.write()
    devices = [str(d) for d in lease.devices]
    shared = f" (share {lease.share} of {lease.per_device})" if lease.per_device > 1 else ""
    logger.info("trial %d starts on %s%s", p.number, ", ".join(devices), shared)
    gang, rendezvous = None, None
    try:
        if seat.session.cfg.trial.resources.nodes > 1:
            gang, rendezvous = gangs.lead(spec, attempt)
        handle: TrialHandle = seat.launcher.launch(spec, lease, rendezvous)
    except BaseException:
        seat.session.storage.leases.close(row, TrialState.FAIL)
        raise
    run_id = p.spec.run_id or ""
    started = seat.clock.monotonic()
    return Running(
        p.number, handle, lease, pool, run_id, row, started, gang, seat.clock.time(), attempt,
        p.spec.reported_through,
    )  # fmt: skip
