"""``hyperfleet pool slurm``: workers as cluster jobs, as many as the queue asks for.

The pool is written against :class:`~.backend.ClusterBackend` (list the pool's jobs, submit,
cancel); Slurm (:mod:`.slurm`) is its first backend. Each decision (every ``every`` seconds,
or once with ``--once``, e.g. from cron):

1. the backend lists the pool's jobs (all named ``hyperfleet-<pool>``); each one the pool
   submitted has a row in ``hf_workers`` (``<kind>-<id>``, e.g. ``slurm-42``, state
   ``pending`` until its worker registers), and every row naming a job gets the cluster's
   state and reason (``job_state``, ``job_reason``), so ``hyperfleet workers`` shows them;
2. a job still pending after ``start_timeout`` is cancelled with its reason kept: a request
   the cluster cannot grant (more CPUs than a node has: Slurm's ``PartitionConfig``) or will
   not grant soon;
3. :mod:`.demand` turns the queued trials and the live and pending workers into the number of
   jobs to submit, at most ``max_workers`` alive, none while start failures back off;
4. the backend submits them: each job runs ``hyperfleet worker --exit-when-idle IDLE``
   (the jobs that keep ``min_workers`` up too: the pool submits their replacements, and a
   job left behind by a pool that is gone ends by itself), so a worker leaves when the queue
   is empty and the pool submits none while nothing waits.

Cluster unreachable: a decision whose backend gets no answer (``slurmctld`` frozen,
restarting: :class:`~.backend.ClusterUnreachableError`) is logged in one line and retried
after a backoff (``every``, doubling to :data:`UNREACHABLE_CAP_S`) instead of ending the pool;
any other error of the backend (a bad ``--sbatch-arg``) still ends it.

Stopping: on SIGTERM or SIGINT (:meth:`ElasticPool.release`) the pool cancels every job it
submitted that is still pending or running, its ``min_workers`` jobs included; the cluster
sends the workers SIGTERM, whose drain requeues their trials. The cluster not answering then
is retried for :data:`RELEASE_S` seconds; the jobs left are named in the log and end by their
idle exit. Slurm's jobs also get SIGTERM before their time limit (:mod:`.slurm`).

Passwords in the URLs travel in the job's environment (``sbatch`` exports the submitter's by
default), never on the job's command line (:mod:`hyperfleet.platform.credentials`).
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from hyperfleet.errors import PoolError
from hyperfleet.platform.clock import STALE_AFTER_S, Clock
from hyperfleet.platform.credentials import keep
from hyperfleet.platform.elastic import BACKOFF_BASE_S, demand
from hyperfleet.platform.elastic.backend import ClusterBackend, ClusterUnreachableError, Job
from hyperfleet.platform.storage import Storage, WorkerRecord
from hyperfleet.spec.states import JOB_ENDED, SWEEP_SERVED, JobState, WorkerState

logger = logging.getLogger(__name__)

UNREACHABLE_CAP_S = 60.0
"""The longest wait between decisions while the cluster does not answer."""
RELEASE_S = 120.0
"""How long a stopping pool keeps trying to cancel its jobs while the cluster does not answer."""
_CPU = re.compile(r"^cpu:(\d+)$")
_CUDA = re.compile(r"^cuda:([\d,]+)$")


@dataclass(frozen=True)
class PoolSettings:
    """What ``hyperfleet pool`` was given, whatever the cluster (its backend takes its own)."""

    storage: str
    max_workers: int
    tracking_uri: str | None = None
    pool: str = "default"
    min_workers: int = 0
    idle: float = 300.0
    devices: str = "auto"
    start_timeout: float = 600.0
    backoff: float = BACKOFF_BASE_S

    @property
    def job_name(self) -> str:
        return f"hyperfleet-{self.pool}"

    def capacity(self) -> int | None:
        """Slots of one worker, from ``devices`` (None for ``auto``: unknown here)."""
        cpu, cuda = _CPU.match(self.devices), _CUDA.match(self.devices)
        if cpu:
            return int(cpu.group(1))
        if cuda:
            return len({i for i in cuda.group(1).split(",") if i})
        return None


@dataclass
class ScalingDecision:
    """One decision's outcome, for the log and the tests (not a scheduler's
    :class:`~hyperfleet.spec.wire.Decision` on a trial)."""

    wanted: int = 0
    alive: int = 0
    submitted: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    waiting_until: float | None = None  # backing off after start failures
    unfit: list[str] = field(default_factory=list)


class ElasticPool:
    """Workers of one pool of a storage, grown and shrunk as jobs of ``backend``'s cluster
    (module docstring)."""

    def __init__(
        self, settings: PoolSettings, backend: ClusterBackend, clock: Clock | None = None
    ) -> None:
        self.settings = settings
        self.backend = backend
        self.storage = Storage(settings.storage, clock=clock)
        self.clock = self.storage.now  # one clock for the pool's decisions and its rows
        self._said: set[str] = set()

    def close(self) -> None:
        self.storage.close()

    def _submitted(self, rows: list[WorkerRecord]) -> list[WorkerRecord]:
        pool = self.settings.pool
        return [w for w in rows if not w.host and w.job_id is not None and w.pool == pool]

    def _refresh(self, jobs: dict[str, Job], decision: ScalingDecision) -> None:
        """The cluster's word on every job of the pool's rows that was alive when last seen; jobs
        pending past ``start_timeout`` cancelled."""
        now, timeout = self.clock(), self.settings.start_timeout
        for row in self._submitted(self.storage.workers.all()):
            assert row.job_id is not None
            if row.job_state in JOB_ENDED:
                continue
            job = jobs.get(row.job_id, Job(row.job_id, JobState.GONE, row.job_reason))
            reason = job.reason
            pending = row.state == WorkerState.PENDING and job.state == JobState.PENDING
            late = row.state == WorkerState.PENDING and now - row.started_at > timeout
            if late and not pending:
                logger.warning(
                    "job %s: past --start-timeout without a worker, but %s lists it as %s "
                    "(%s): not cancelled now", job.id, self.backend.kind, job.state,
                    job.reason or "no reason",
                )  # fmt: skip
            if pending and late:
                self.backend.cancel(job.id)
                decision.cancelled.append(job.id)
                reason = f"{reason or 'pending'}; cancelled after pending {timeout:g}s"
                job = Job(job.id, JobState.CANCELLED, reason)
            self.storage.workers.set_job(job.id, job.state, reason, ended=job.state in JOB_ENDED)

    def _wanted(self, decision: ScalingDecision) -> int:
        demands = []
        for row in self.storage.sweeps.all():
            cfg = row.config
            if row.status not in SWEEP_SERVED or cfg is None:
                continue
            if cfg.trial.resources.pool not in (None, self.settings.pool):
                continue
            demands.append(demand.sweep_demand(cfg, self.storage.trials.of(row.name)))
        wanted, decision.unfit = demand.workers_wanted(demands, self.settings.capacity())
        for line in decision.unfit:
            if line not in self._said:
                logger.warning("%s", line)
                self._said.add(line)
        return wanted

    def step(self) -> ScalingDecision:
        """One decision (the module docstring's steps)."""
        s, decision = self.settings, ScalingDecision()
        self._refresh(self.backend.jobs(s.job_name), decision)
        rows = self.storage.workers.all()
        ours = {w.job_id for w in self._submitted(rows) if w.job_state not in JOB_ENDED}
        decision.alive = len(ours)
        others = [w for w in self.storage.workers.live(STALE_AFTER_S) if w.pool == s.pool]
        others = [w for w in others if w.job_id not in ours]
        decision.wanted = self._wanted(decision)
        n = demand.to_submit(decision.wanted, len(ours), len(others), s.min_workers, s.max_workers)
        until = demand.retry_at(demand.start_failures(rows, s.pool), s.backoff)
        if n and until is not None and until > self.clock():
            decision.waiting_until, n = until, 0
        for _ in range(n):
            decision.submitted.append(self._submit())
        return decision

    def worker_command(self) -> list[str]:
        """The job's command: this interpreter's ``hyperfleet worker`` on the pool's storage,
        leaving when idle (the jobs that keep ``min_workers`` up too: the pool replaces them)."""
        s = self.settings
        command = [
            sys.executable, "-m", "hyperfleet.platform", "worker", "--storage", keep(s.storage),
            "--pool", s.pool, "--devices", s.devices,
        ]  # fmt: skip
        if s.tracking_uri:
            command += ["--tracking-uri", keep(s.tracking_uri)]
        return [*command, "--exit-when-idle", f"{s.idle:g}s"]

    def _submit(self) -> str:
        s = self.settings
        job_id = self.backend.submit(self.worker_command(), s.job_name)
        now = self.clock()
        self.storage.workers.register(
            WorkerRecord(
                id=f"{self.backend.kind}-{job_id}", host="", pid=0, pool=s.pool, devices=[],
                address=None, sweeps=None, started_at=now, heartbeat_at=now,
                state=WorkerState.PENDING, job_id=job_id, job_state=JobState.PENDING,
            )
        )  # fmt: skip
        logger.info("submitted job %s (%s)", job_id, s.job_name)
        return job_id

    def run(self, stop: Callable[[], bool], every: float, say: Callable[[str], None]) -> None:
        """Decide every ``every`` seconds until ``stop()``; ``say`` each change in one line.
        A decision the cluster does not answer is said and retried after a backoff."""
        last, wait = "", every
        while not stop():
            try:
                d = self.step()
            except ClusterUnreachableError as exc:
                wait = min(max(wait * 2, every), UNREACHABLE_CAP_S)
                say(f"{self.backend.kind} does not answer ({exc}); retrying in {wait:g}s")
                last = ""
            else:
                wait = every
                line = describe(d)
                if d.submitted or d.cancelled or line != last:
                    say(line)
                    last = line
            _sleep(stop, wait)

    def alive_jobs(self) -> list[str]:
        """The jobs this pool submitted that were pending or running when last seen."""
        rows = self._submitted(self.storage.workers.all())
        return [w.job_id for w in rows if w.job_id is not None and w.job_state not in JOB_ENDED]

    def release(self, say: Callable[[str], None], within: float = RELEASE_S) -> list[str]:
        """Cancel every job the pool submitted that is still alive (module docstring); the
        ones the cluster did not let it cancel within ``within`` seconds."""
        left = self.alive_jobs()
        deadline = time.monotonic() + within
        while left:
            for job_id in list(left):
                try:
                    self.backend.cancel(job_id)
                except ClusterUnreachableError as exc:
                    kind = self.backend.kind
                    if time.monotonic() >= deadline:
                        say(f"{kind} does not answer ({exc}); jobs {', '.join(left)} left to "
                            f"their idle exit")  # fmt: skip
                        return left
                    say(f"{kind} does not answer ({exc}); retrying the cancel")
                    time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
                    break
                except PoolError as exc:  # e.g. the job ended since it was last seen
                    say(f"stopping: job {job_id}: {exc}")
                    left.remove(job_id)
                    continue
                left.remove(job_id)
                self.storage.workers.set_job(job_id, JobState.CANCELLED, "pool stopped", ended=True)
                say(f"stopping: cancelled job {job_id}")
        return left


def _sleep(stop: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not stop() and time.monotonic() < deadline:
        time.sleep(min(0.5, seconds))


def describe(d: ScalingDecision) -> str:
    """One line for a decision."""
    line = f"queue wants {d.wanted} workers; {d.alive} jobs alive"
    if d.submitted:
        line += f"; submitted {', '.join(d.submitted)}"
    if d.cancelled:
        line += f"; cancelled {', '.join(d.cancelled)} (pending too long)"
    if d.waiting_until is not None:
        when = time.strftime("%H:%M:%S", time.localtime(d.waiting_until))
        line += f"; start failures: next submission after {when}"
    return line
