"""A full disk, told apart from a failure: the sweep stops with one line, its trials requeued.

When the disk under a sweep's working directory, checkpoints, spools or SQLite storage fills up,
every write fails, and every trial with it; retrying them only burns their retries, and the
tracebacks bury the one fact the user needs. So a full disk is recognised where it shows:

* in an exception (of the controller): ``OSError`` with ``ENOSPC`` or ``EDQUOT`` anywhere in
  its chain (its ``filename`` is the path), or SQLite's "database or disk is full";
* in a trial that failed: its log says so, or its folder's file system has less than
  :data:`LOW_BYTES` left (a full disk may not even take the trial's traceback, and a
  checkpoint writer may word the error its own way).

The controller then requeues the trial without counting a retry, stops the sweep's other
trials (requeued too) and raises :class:`~hyperfleet.errors.DiskFullError`: the CLI prints
one line naming the path and exits 5. Once space is freed the same command resumes them.
"""

from __future__ import annotations

import errno
import os
import re

from hyperfleet.errors import DiskFullError

LOW_BYTES = 256 * 1024  # a failed trial's file system with less than this left: the disk
_FULL = (errno.ENOSPC, errno.EDQUOT)
_WORDS = ("no space left on device", "database or disk is full", "disk quota exceeded")
_PATH = re.compile(r"No space left on device: '([^']+)'")


def full_path(exc: BaseException | None) -> str | None:
    """The path (or ``"?"``) when ``exc`` or what it wraps says the disk is full; else None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, DiskFullError):
            return exc.path
        if isinstance(exc, OSError) and exc.errno in _FULL:
            return str(exc.filename) if exc.filename else "?"
        text = str(exc).lower()
        if "database or disk is full" in text:
            return "the storage's SQLite file"
        exc = exc.__cause__ or exc.__context__
    return None


def free_bytes(path: str | None) -> int | None:
    """Bytes left to an unprivileged writer on ``path``'s file system (None: unknown)."""
    if not path:
        return None
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def trial_disk_full(log_tail: str, trial_dir: str | None) -> str | None:
    """Where the disk is full, when a failed trial's log or folder says so; else None."""
    found = _PATH.search(log_tail)
    if found:
        return found.group(1)
    if any(word in log_tail.lower() for word in _WORDS):
        return trial_dir or "?"
    free = free_bytes(trial_dir)
    if free is not None and free < LOW_BYTES:
        return trial_dir
    return None


def disk_full_error(path: str) -> DiskFullError:
    return DiskFullError(
        f"disk full: no space left on device at {path}; stopped cleanly: running trials go "
        f"back in the queue (no retry counted); free space, then run the same command again",
        path,
    )
