"""Slurm through its own commands: ``sbatch --parsable``, ``squeue -o``, ``scancel``.

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
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hyperfleet.errors import PoolError

TIMEOUT_S = 60.0  # one Slurm command; slurmctld answers in milliseconds when it is up
_UNREACHABLE = re.compile(
    r"timed out|unable to contact|connect(ion)? (failure|refused)|zero bytes were transmitted|"
    r"not connected|temporarily unavailable|try again",
    re.IGNORECASE,
)
"""What Slurm's client commands say when ``slurmctld`` does not answer (Slurm 22.05)."""


class SlurmUnreachableError(PoolError):
    """A Slurm command got no answer from ``slurmctld``: a transient error, worth a retry."""


@dataclass(frozen=True)
class Job:
    """One job as ``squeue`` shows it."""

    id: str
    state: str  # a JobState value, or Slurm's own word for a state this version does not know
    reason: str | None  # None where Slurm says "None"


class Slurm:
    """Slurm's client commands (``env``: their environment, e.g. ``SLURM_CONF``; default this
    process's)."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
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

    def submit(self, command: Sequence[str], name: str, args: Sequence[str], log: Path) -> str:
        """Submit a batch job that ``exec``s ``command`` (so Slurm's signals reach it, not a
        shell), named ``name``, its output in ``log`` (``%j``: the job id); its id."""
        argv = [
            "sbatch", "--parsable", f"--job-name={name}", f"--output={log}", *args,
            "--wrap", "exec " + shlex.join(command),
        ]  # fmt: skip
        out = self._run(argv).strip()
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
