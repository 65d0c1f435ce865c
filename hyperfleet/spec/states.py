"""Every state the platform stores, as ``str``-valued enums: a member compares and stores as
its value, so the rows written before these enums read the same.

* :class:`TrialState` — ``hf_trials.state`` and how a launch ended (``hf_leases.state``);
* :class:`Outcome` — ``hf_trials.outcome``: how a trial's processes ended, as its rank 0
  recorded it (the trial side writes it, so these live in ``hyperfleet.spec``);
* :class:`SweepStatus` — ``hf_sweeps.status``;
* :class:`WorkerState` — ``hf_workers.state``;
* :class:`GangState` — ``hf_gangs.state``;
* :class:`MemberState` — ``hf_pbt_members.state`` (a PBT member's own life, lower case);
* :class:`JobState` — ``hf_workers.job_state``: a batch job's state as Slurm names it
  (``squeue``'s ``%T``), for workers an elastic pool submitted.

This module imports nothing, so storage, schedulers, dashboards and trials may all import it.
No other module spells a trial state as a string (``tests/test_states.py``).
"""

from __future__ import annotations

import enum

__all__ = [
    "FINISHED",
    "JOB_ENDED",
    "SWEEP_HALTED",
    "SWEEP_SERVED",
    "GangState",
    "JobState",
    "MemberState",
    "Outcome",
    "SweepStatus",
    "TrialState",
    "WorkerState",
]


class TrialState(enum.StrEnum):
    """A trial's state; the first five are Optuna's names."""

    WAITING = "WAITING"
    """Queued: never started, or requeued (stopped, retried, taken over from a lost worker)."""
    RUNNING = "RUNNING"
    """Has processes under a worker."""
    COMPLETE = "COMPLETE"
    PRUNED = "PRUNED"
    FAIL = "FAIL"
    PAUSED = "PAUSED"
    """A PBT member that checkpointed and gave its devices back; its scheduler resumes it."""
    LOST = "LOST"
    """A launch whose worker or copy vanished (a lease's end only, never a trial's)."""

    @property
    def finished(self) -> bool:
        """Ended for good: COMPLETE, PRUNED or FAIL."""
        return self in FINISHED


FINISHED = frozenset({TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL})
"""The states a trial ends in for good."""


class Outcome(enum.StrEnum):
    """How a trial's processes ended, as its rank 0 recorded it (lower case)."""

    COMPLETE = "complete"
    PRUNED = "pruned"
    PAUSED = "paused"
    """PBT paused it: checkpointed, devices given back."""
    FAIL = "fail"
    SUPERSEDED = "superseded"
    """A newer attempt owns the trial: nothing is recorded."""


class SweepStatus(enum.StrEnum):
    """A sweep's status."""

    CREATED = "created"
    SUBMITTED = "submitted"
    """Handed to the fleet's workers (``sweep run --submit``); none has opened it yet."""
    RUNNING = "running"
    DONE = "done"
    INTERRUPTED = "interrupted"
    PAUSED = "paused"
    """A user paused it (``sweep pause``): no worker claims its trials, its running trials went
    back to the queue; ``sweep resume`` serves it again."""
    STOPPED = "stopped"
    """A user stopped it (``sweep stop``): its running trials ended; it is never served again."""


SWEEP_SERVED = frozenset({SweepStatus.SUBMITTED, SweepStatus.RUNNING})
"""The statuses of a sweep the fleet serves: its workers run its trials, an elastic pool
submits jobs for its queue (never a PAUSED or STOPPED one)."""

SWEEP_HALTED = frozenset({SweepStatus.PAUSED, SweepStatus.STOPPED})
"""The statuses a user set that workers read on their loop and leave the sweep for; only
``sweep resume`` (PAUSED) changes them again, never a worker opening or closing the sweep."""


class WorkerState(enum.StrEnum):
    """A worker process's state (a silent worker is *lost*, which is never stored)."""

    ACTIVE = "active"
    STOPPED = "stopped"
    PENDING = "pending"  # a batch job submitted for it; its worker has not registered yet


class GangState(enum.StrEnum):
    """A trial spanning hosts: open to nodes joining, full, or over."""

    OPEN = "open"
    FULL = "full"
    OVER = "over"


class MemberState(enum.StrEnum):
    """A PBT member's state."""

    WAITING = "waiting"  # created or crashed: (re)start from its checkpoint pointer
    RUNNING = "running"  # has processes
    PAUSED = "paused"  # checkpointed and gave its devices back; resumed by suggest()
    DONE = "done"  # reached its step budget (or ended for good)


class JobState(enum.StrEnum):
    """A Slurm job's state, Slurm's own names (``squeue -o %T``; ``man squeue``, JOB STATE
    CODES). A state this list does not know is kept as Slurm wrote it and counts as alive."""

    PENDING = "PENDING"
    CONFIGURING = "CONFIGURING"
    RUNNING = "RUNNING"
    COMPLETING = "COMPLETING"
    SUSPENDED = "SUSPENDED"
    REQUEUED = "REQUEUED"
    RESIZING = "RESIZING"
    SIGNALING = "SIGNALING"
    STAGE_OUT = "STAGE_OUT"
    STOPPED = "STOPPED"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    PREEMPTED = "PREEMPTED"
    NODE_FAIL = "NODE_FAIL"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    REVOKED = "REVOKED"
    SPECIAL_EXIT = "SPECIAL_EXIT"
    GONE = "GONE"  # not hyperfleet's nor Slurm's: the job left squeue's list (MinJobAge)


JOB_ENDED = frozenset(
    {
        JobState.COMPLETED, JobState.CANCELLED, JobState.FAILED, JobState.TIMEOUT,
        JobState.PREEMPTED, JobState.NODE_FAIL, JobState.BOOT_FAIL, JobState.DEADLINE,
        JobState.OUT_OF_MEMORY, JobState.REVOKED, JobState.SPECIAL_EXIT, JobState.GONE,
    }
)  # fmt: skip
"""Job states after which the job holds no node (a job in any other state is alive)."""
