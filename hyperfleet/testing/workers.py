"""Real ``hyperfleet worker`` processes for tests and benchmarks.

``worker_command(storage, ...)`` is the command line of a worker serving the store at
``storage``, with the flags a test usually sets as keywords (``devices="cpu:2"``,
``heartbeat="1s"``, ``stale_after="15s"``, ``exit_when_idle="3s"``, ``sweep="name"``) and any
other flags after them; ``start_worker`` starts such a command (its output into a log file, or
a pipe) and returns the ``Popen``; ``running_worker`` is the same as a context manager that
stops the worker on exit (SIGTERM, as ``hyperfleet worker`` is stopped, then a kill after a
grace period)::

    with running_worker(worker_command(url, devices="cpu:1"), log=tmp_path / "w.log") as proc:
        ...
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO

#: how long a stopped worker may take to end its trials and deregister before it is killed
WORKER_STOP_GRACE_S = 30.0

__all__ = ["running_worker", "start_worker", "stop_worker", "worker_command"]


def worker_command(
    storage: str,
    *args: str,
    devices: str | None = None,
    heartbeat: str | None = None,
    stale_after: str | None = None,
    exit_when_idle: str | None = None,
    sweep: str | None = None,
    verbose: bool = True,
    prefix: Sequence[str] = (),
) -> list[str]:
    """``[*prefix, python, -m, hyperfleet.platform, [-v], worker, --storage, storage, ...]``;
    ``prefix``: a command that runs the worker elsewhere (a namespace, another host)."""
    cmd = [*prefix, sys.executable, "-m", "hyperfleet.platform", *(["-v"] if verbose else [])]
    cmd += ["worker", "--storage", storage]
    flags = {
        "--sweep": sweep,
        "--devices": devices,
        "--heartbeat": heartbeat,
        "--stale-after": stale_after,
        "--exit-when-idle": exit_when_idle,
    }
    for flag, value in flags.items():
        if value is not None:
            cmd += [flag, value]
    return [*cmd, *args]


def start_worker(
    cmd: Sequence[str],
    *,
    log: Path | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    new_session: bool = False,
) -> subprocess.Popen[str]:
    """``cmd`` (a :func:`worker_command`) started in ``cwd`` with ``env``; its stdout and
    stderr together into ``log`` (a file, written afresh), or a pipe (``proc.communicate()``)
    when ``log`` is None. ``new_session``: in a process group of its own, so that a test can
    signal the worker and its trials together."""
    out: IO[str] | int = subprocess.PIPE if log is None else log.open("w")
    try:
        return subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=env,
                                start_new_session=new_session, text=True)  # fmt: skip
    finally:
        if not isinstance(out, int):
            out.close()  # the worker holds its own copy of the descriptor


def stop_worker(proc: subprocess.Popen[str], grace: float = WORKER_STOP_GRACE_S) -> int:
    """Stop a worker as an operator does (SIGTERM: it ends its trials and deregisters); killed
    if it has not exited after ``grace`` seconds. Its exit status."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


@contextlib.contextmanager
def running_worker(
    cmd: Sequence[str],
    *,
    log: Path | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    grace: float = WORKER_STOP_GRACE_S,
) -> Iterator[subprocess.Popen[str]]:
    """:func:`start_worker`, stopped by :func:`stop_worker` on exit whatever happened."""
    proc = start_worker(cmd, log=log, cwd=cwd, env=env)
    try:
        yield proc
    finally:
        stop_worker(proc, grace)
