"""An in-memory cluster for the elastic pool's tests, and the contract every cluster backend
passes.

:class:`FakeCluster` is a :class:`~hyperfleet.platform.elastic.backend.ClusterBackend` whose
jobs are a dict: a submitted job pends until the test moves it (:meth:`FakeCluster.move`), a
cancelled one is ``CANCELLED``, and ``unreachable`` makes every call raise
:class:`~hyperfleet.platform.elastic.backend.ClusterUnreachableError` (a frozen scheduler). The
pool's rules (:class:`~hyperfleet.platform.elastic.pool.ElasticPool`) are tested against it in
milliseconds; a real Slurm runs in ``tests/platform/elastic/test_slurm_pool.py``.

:class:`ClusterBackendContract` is the backend contract suite: subclass it in a test module
(a class named ``Test...``), override its ``backend`` fixture, and give ``command`` (a process
that stays up until cancelled) and ``settle`` (how long the cluster may take to list a state
change)::

    class TestMyCluster(ClusterBackendContract):
        @pytest.fixture
        def backend(self) -> ClusterBackend:
            return MyCluster(...)

What is checked: a submitted job is listed under its name (alive: pending or running), not
under another; jobs get distinct ids; a cancelled job is listed as ended or not at all.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Sequence
from typing import ClassVar

import pytest

from hyperfleet.errors import PoolError
from hyperfleet.platform.elastic.backend import ClusterBackend, ClusterUnreachableError, Job
from hyperfleet.spec.states import JOB_ENDED, JobState


class FakeCluster:
    """Jobs held in memory (the module docstring); ``commands`` and ``names``: what each
    submission asked for, in order."""

    kind = "fake"

    def __init__(self) -> None:
        self.listed: dict[str, Job] = {}
        self.names: dict[str, str] = {}
        self.commands: list[list[str]] = []
        self.unreachable = False
        self._ids = itertools.count(1)

    def _answer(self) -> None:
        if self.unreachable:
            raise ClusterUnreachableError("the fake cluster does not answer")

    def submit(self, command: Sequence[str], name: str) -> str:
        self._answer()
        job = str(next(self._ids))
        self.commands.append(list(command))
        self.names[job] = name
        self.listed[job] = Job(job, JobState.PENDING, None)
        return job

    def jobs(self, name: str) -> dict[str, Job]:
        self._answer()
        return {j: job for j, job in self.listed.items() if self.names[j] == name}

    def cancel(self, job_id: str) -> None:
        self._answer()
        if job_id not in self.listed:
            raise PoolError(f"cancel: no job {job_id}")
        self.listed[job_id] = Job(job_id, JobState.CANCELLED, self.listed[job_id].reason)

    def move(self, job_id: str, state: str, reason: str | None = None) -> None:
        """The cluster moves a job to ``state`` (a JobState value), with ``reason``."""
        self.listed[job_id] = Job(job_id, state, reason)

    def forget(self, job_id: str) -> None:
        """The cluster no longer lists the job (Slurm past ``MinJobAge``)."""
        del self.listed[job_id]


class ClusterBackendContract:
    """What every cluster backend does (the module docstring)."""

    command: ClassVar[Sequence[str]] = ("sleep", "600")
    settle: ClassVar[float] = 0.0

    @pytest.fixture
    def backend(self) -> ClusterBackend:
        raise NotImplementedError("override the backend fixture")

    def _until(self, check: Callable[[], bool]) -> bool:
        end = time.monotonic() + self.settle
        while not check():
            if time.monotonic() >= end:
                return False
            time.sleep(0.2)
        return True

    def test_a_submitted_job_is_listed_alive_under_its_name_only(
        self, backend: ClusterBackend
    ) -> None:
        name, other = f"hf-contract-{uuid.uuid4().hex[:8]}", "hf-contract-other"
        first = backend.submit(self.command, name)
        second = backend.submit(self.command, name)
        try:
            assert first != second, "each job its own id"
            listed = backend.jobs(name)
            assert {first, second} <= set(listed)
            assert all(listed[j].state not in JOB_ENDED for j in (first, second)), listed
            assert not {first, second} & set(backend.jobs(other))
        finally:
            backend.cancel(first)
            backend.cancel(second)

    def test_a_cancelled_job_is_listed_ended_or_not_at_all(self, backend: ClusterBackend) -> None:
        name = f"hf-contract-{uuid.uuid4().hex[:8]}"
        job = backend.submit(self.command, name)
        backend.cancel(job)

        def ended() -> bool:
            listed = backend.jobs(name).get(job)
            return listed is None or listed.state in JOB_ENDED

        assert self._until(ended), backend.jobs(name)


__all__ = ["ClusterBackendContract", "FakeCluster"]
