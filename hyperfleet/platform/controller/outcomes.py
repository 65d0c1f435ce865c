"""What a trial's record says about how it ended: a finite objective, the exception its log
ends with."""

from __future__ import annotations

import math
import re

_RAISED = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b.*$")


def finite(value: object) -> float | None:
    """``value`` as a finite float, or None (NaN, infinities, stored as strings or not)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def raised(log_tail: str) -> str | None:
    """The exception a failed trial's log ends with (``RuntimeError: boom``), if any."""
    for line in reversed(log_tail.splitlines()):
        text = line.strip().split("] ", 1)[-1] if line.startswith("[") else line.strip()
        if _RAISED.match(text):
            return text
    return None
