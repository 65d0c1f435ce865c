"""What a trial's record says about how it ended: a finite objective, the exception its log
ends with, as plain text.

A trial's log is written for a terminal: torch's ``weights_only`` errors are bold, progress
bars rewrite their line with carriage returns. :func:`plain` removes ECMA-48 escape sequences (CSI
``ESC [ ... final``, OSC ``ESC ] ... BEL|ST``, the two-byte ``ESC X`` forms, and their 8-bit
C1 equivalents) and the other control characters but tab and newline, so a stored error, its
MLflow tag and ``sweep status`` show the words alone and cannot drive a reader's terminal."""

from __future__ import annotations

import math
import re

_ESCAPES = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves
    r"|(?:\x1b\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC: titles, links
    r"|\x1b[PX^_][^\x1b\x9c]*(?:\x1b\\|\x9c)?"  # DCS, SOS, PM, APC strings
    r"|\x1b[ -/]*[0-~]"  # the other escape sequences
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"  # control characters but tab and newline
)
_RAISED = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b.*$")


def finite(value: object) -> float | None:
    """``value`` as a finite float, or None (NaN, infinities, stored as strings or not)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def plain(text: str) -> str:
    """``text`` without terminal escape sequences and control characters (see above)."""
    return _ESCAPES.sub("", text)


def raised(log_tail: str) -> str | None:
    """The exception a failed trial's log ends with (``RuntimeError: boom``), if any."""
    for line in reversed(log_tail.splitlines()):
        text = line.strip().split("] ", 1)[-1] if line.startswith("[") else line.strip()
        if _RAISED.match(text):
            return text
    return None
