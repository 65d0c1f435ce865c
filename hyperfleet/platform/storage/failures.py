"""Why a trial failed, in one line.

A failed trial's stored error is its last launch's exit code and the end of its log. Its
*failure line* is the exception the workload or program raised last (``RuntimeError: loss
diverged``), found as a reader of a traceback finds it: the last line that reads as an
exception (a dotted name ending in ``Error``, ``Exception``, ``Interrupt`` or ``Exit``, then
its message), whatever follows it in the log. A wrapper that only says a process failed is
passed over: torchrun's agent ends a multi-rank trial's log with ``ChildFailedError`` and a
table of ranks, times and pids, below the ranks' own tracebacks. A failure without an
exception (a timeout, a lost worker, a missing objective) is named by its last line.

A launch that raises the same exception (type and message) as the trial's previous failure is
not retried (:func:`hyperfleet.platform.controller.outcomes.failed`): a deterministic error is
not paid for again and again.
"""

from __future__ import annotations

import re

_RAISED = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b.*$")
_PREFIX = re.compile(r"^\[[^\]]*\]:?\s*")  # a rank's prefix: ``[rank0]: ``, ``[2] ``
_WRAPPERS = re.compile(
    r"^(torch\.distributed\.elastic\.multiprocessing\.errors\.)?ChildFailedError\b"
)


def raised(text: str) -> str | None:
    """The exception a failed trial's log or error ends with (``RuntimeError: boom``), if
    any: the last line that reads as one (a rank's ``[rank0]:`` prefix left out), torchrun's
    ``ChildFailedError`` passed over."""
    for line in reversed(text.splitlines()):
        line = _PREFIX.sub("", line.strip())
        if _RAISED.match(line) and not _WRAPPERS.match(line):
            return line
    return None


def reason(error: str | None) -> str:
    """Why a trial failed, in one line: its failure line (the last exception its error
    names), else the error's last line, or ``no reason recorded``."""
    found = raised(error or "")
    if found is not None:
        return found
    lines = [x.strip() for x in (error or "").splitlines() if x.strip()]
    return lines[-1] if lines else "no reason recorded"
