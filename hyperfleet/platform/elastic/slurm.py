"""Slurm through its own commands: ``sbatch --parsable``, ``squeue -o``, ``scancel``; the first
:class:`~.backend.ClusterBackend`.

Only the client commands are used (Slurm 22.05 and later), so the pool runs wherever a user
could submit by hand: a login node, or cron. ``sbatch --parsable`` prints ``id[;cluster]``;
``squeue --noheader --states=all --name=NAME --format=%i|%T|%r`` lists each job of that name,
pending, running or recently ended (Slurm keeps an ended job for ``MinJobAge``, 300 s by
default), with its state (``%T``, :class:`~hyperfleet.spec.states.JobState`) and reason
(``%r``: ``Resources``, ``Priority``, ``PartitionConfig``, ``NonZeroExitCode``...). A job
missing from the list is over (:attr:`~hyperfleet.spec.states.JobState.GONE`).

A command that fails raises :class:`~hyperfleet.errors.PoolError` with the command's own last
line; a missing command says which package provides it. A command that gets no answer from
``slurmctld`` (frozen, restarting, failed over: it times out, or says ``Socket timed out``,
``Unable to contact slurm controller``, ``Connection refused``...) raises
:class:`SlurmUnreachableError`, which the pool rides out with backoff instead of exiting.

Each job is submitted with ``--signal=B:TERM@120`` (unless an ``sbatch`` option of the pool
gives ``--signal`` itself): Slurm sends the worker SIGTERM two minutes before the job's time
limit, so it drains (its trials checkpoint and go back to the queue) instead of being killed.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from hyperfleet.errors import PoolError
from hyperfleet.platform.elastic.backend import ClusterUnreachableError, Job

TIMEOUT_S = 60.0  # one Slurm command; slurmctld answers in milliseconds when it is up
_UNREACHABLE = re.compile(
    r"timed out|unable to contact|connect(ion)? (failure|refused)|zero bytes were transmitted|"
    r"not connected|temporarily unavailable|try again",
    re.IGNORECASE,
)
"""What Slurm's client commands say when ``slurmctld`` does not answer (Slurm 22.05)."""
DRAIN_SIGNAL = "--signal=B:TERM@120"


class SlurmUnreachableError(ClusterUnreachableError):
    """A Slurm command got no answer from ``slurmctld``: a transient error, worth a retry."""


class Slurm:
    """Slurm's client commands: ``sbatch_args`` go to every job, whose output is
    ``log_dir/worker-<job id>.log``; ``env`` is the commands' environment (e.g.
    ``SLURM_CONF``; default this process's)."""

    kind = "slurm"

    def __init__(
        self,
        sbatch_args: Sequence[str] = (),
        log_dir: Path = Path("hyperfleet-slurm"),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.sbatch_args = tuple(sbatch_args)
        self.log_dir = log_dir
        self.env = dict(env) if env is not None else None

    def _run(self, argv: Sequence[str]) -> str:
        try:
            done = subprocess.run(
                list(argv), capture_output=True, text=True, timeout=TIMEOUT_S, env=self.env
            )
        except FileNotFoundError:
            raise PoolError(
                f"{argv[0]}: not found; install Slurm's client commands (Debian: slurm-client) "
                f"or run the pool where they are"
            ) from None
        except subprocess.TimeoutExpired:
            raise SlurmUnreachableError(
                f"{argv[0]}: no answer in {TIMEOUT_S:g}s; is slurmctld up?"
            ) from None
        if done.returncode != 0:
            lines = (done.stderr or done.stdout).strip().splitlines() or ["(no output)"]
            line = f"{argv[0]} failed ({done.returncode}): {lines[-1]}"
            text = done.stderr + done.stdout
            raise SlurmUnreachableError(line) if _UNREACHABLE.search(text) else PoolError(line)
        return done.stdout

    def sbatch_argv(self, command: Sequence[str], name: str) -> list[str]:
        """The ``sbatch`` command line of a job that ``exec``s ``command`` (so Slurm's signals
        reach it, not a shell), named ``name``."""
        args = list(self.sbatch_args)
        if not any(a.startswith("--signal") for a in args):
            args.insert(0, DRAIN_SIGNAL)
        log = self.log_dir.resolve() / "worker-%j.log"
        return [
            "sbatch", "--parsable", f"--job-name={name}", f"--output={log}", *args,
            "--wrap", "exec " + shlex.join(command),
        ]  # fmt: skip

    def submit(self, command: Sequence[str], name: str) -> str:
        """Submit a batch job (:meth:`sbatch_argv`); its id."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        out = self._run(self.sbatch_argv(command, name)).strip()
        job_id = out.split(";", 1)[0]
        if not job_id.isdigit():
            raise PoolError(f"sbatch: expected a job id, got {out!r}")
        return job_id

    def jobs(self, name: str) -> dict[str, Job]:
        """Every job named ``name`` that Slurm still lists, by id."""
        out = self._run(
            ["squeue", "--noheader", "--states=all", f"--name={name}", "--format=%i|%T|%r"]
        )
        found = {}
        for line in out.splitlines():
            parts = line.strip().split("|", 2)
            if len(parts) != 3:
                continue
            job_id, state, reason = (p.strip() for p in parts)
            found[job_id] = Job(job_id, state, None if reason in ("", "None") else reason)
        return found

    def cancel(self, job_id: str) -> None:
        self._run(["scancel", job_id])
