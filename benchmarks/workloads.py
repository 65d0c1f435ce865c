"""Workloads of the side-by-side benchmarks, written against hyperfleet's public contract."""

from __future__ import annotations

from typing import Any


def noop(ctx: Any) -> None:
    """No compute: ``ctx.max_steps`` reports of a constant, so a trial costs only overhead."""
    for step in range(1, ctx.max_steps + 1):
        ctx.report(step, {"score": float(step)})
