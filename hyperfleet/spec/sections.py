"""What every section of the ``trial:`` part of a sweep file shares: a frozen model that
refuses unknown keys, and durations written as ``90s``, ``30m``, ``2h`` or ``1d``."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def parse_duration(value: Any) -> Any:
    """``90s``, ``30m``, ``2h``, ``1d`` or a number of seconds as seconds (other values as is,
    for pydantic to reject with its own message)."""
    if isinstance(value, str):
        m = _DURATION.match(value)
        if not m:
            raise ValueError(f"expected a duration such as 90s, 30m or 2h, got {value!r}")
        return float(m.group(1)) * _UNITS[m.group(2)]
    return value


Seconds = Annotated[float, BeforeValidator(parse_duration)]
"""A duration field: seconds, given as a number or as ``90s``, ``30m``, ``2h``, ``1d``."""


class Section(BaseModel):
    """A section of the sweep file: frozen, unknown keys refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)
