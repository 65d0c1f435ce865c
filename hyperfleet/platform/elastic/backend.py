"""The contract between an elastic pool and a cluster's batch scheduler: list the pool's jobs
with their states, submit one, cancel one.

:class:`ClusterBackend` is all :mod:`.pool` knows of a cluster; :mod:`.slurm` is the first
implementation (``sbatch``/``squeue``/``scancel``), and ``hyperfleet.testing.cluster`` holds an
in-memory one for the pool's unit tests. A backend keeps what is its own (Slurm's ``sbatch``
options, where a job's output goes) in its constructor: the pool hands it only the worker's
command and the pool's job name.

States are :class:`~hyperfleet.spec.states.JobState` values (Slurm's words, which the pool
stores and ``hyperfleet workers`` shows): a backend for another cluster maps its own states onto
them (a Kubernetes Job's ``Active``/``Succeeded``/``Failed`` onto ``RUNNING``/``COMPLETED``/
``FAILED``; a pod not yet scheduled is ``PENDING`` with the scheduler's reason).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from hyperfleet.errors import PoolError


class ClusterUnreachableError(PoolError):
    """The cluster's scheduler did not answer (frozen, restarting, failed over): a transient
    error, which the pool rides out with backoff instead of exiting."""


@dataclass(frozen=True)
class Job:
    """One job as the cluster lists it."""

    id: str
    state: str  # a JobState value, or the cluster's own word for a state it does not map
    reason: str | None  # why it is in that state (Slurm's ``Resources``...), None if none


class ClusterBackend(Protocol):
    """A cluster's batch scheduler, as an elastic pool uses it (the module docstring)."""

    kind: str
    """Short name of the cluster (``slurm``): a submitted job's worker row is
    ``<kind>-<job id>`` until its worker registers."""

    def jobs(self, name: str) -> dict[str, Job]:
        """Every job named ``name`` the cluster still lists, by id: pending, running, and
        ended ones it still remembers; a job missing from it is over
        (:attr:`~hyperfleet.spec.states.JobState.GONE`)."""
        ...

    def submit(self, command: Sequence[str], name: str) -> str:
        """Submit a job named ``name`` whose process is ``command`` (signals the cluster sends
        the job reach it); the job's id."""
        ...

    def cancel(self, job_id: str) -> None:
        """Cancel the job: its process gets SIGTERM (its worker drains), then SIGKILL."""
        ...


__all__ = ["ClusterBackend", "ClusterUnreachableError", "Job"]
