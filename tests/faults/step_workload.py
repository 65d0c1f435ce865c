"""A function trial that reports the step ``params["steps"][params["which"]]``
(for ``tests/faults/test_step_range.py``)."""

from __future__ import annotations

from typing import Any


def main(ctx: Any) -> None:
    ctx.report(int(ctx.params["steps"][ctx.params["which"]]), {"loss": 0.5})
