"""In-process workloads for the dashboard tests: cheap learning curves with several metrics."""

from __future__ import annotations

import math
from typing import Any


def curve(ctx: Any) -> None:
    """A learning curve that converges to a loss set by ``lr`` and ``width``.

    Reports ``loss`` (lower is better), ``accuracy`` and ``cost`` (grows with ``width``) at
    every evaluation step; ``fail_at`` > 0 makes trials whose number is a multiple of it raise,
    so a sweep has failed trials with a real traceback: trial 0 at its first step, before any
    report, the others half-way, with an error text longer than MLflow's tag limit.
    """
    lr = float(ctx.params["lr"])
    width = float(ctx.params.get("width", 64))
    fail_at = int(ctx.params.get("fail_at", 0))
    state = ctx.load_checkpoint()
    step = int(state["step"]) if state else 0
    floor = (math.log10(lr) + 2.5) ** 2 * 0.1 + 8.0 / width
    while step < ctx.max_steps:
        step += 1
        if fail_at and ctx.trial_number == 0:
            raise RuntimeError(f"diverged: loss is nan at step {step} (lr={lr:.3g})")
        if fail_at and ctx.trial_number % fail_at == 0 and step > ctx.max_steps // 2:
            raise RuntimeError(f"diverged: loss is nan at step {step} (lr={lr:.3g})\n{_dump()}")
        if ctx.should_eval(step):
            loss = floor + 2.0 * math.exp(-step * lr * 20)
            metrics = {"loss": loss, "accuracy": 1.0 / (1.0 + loss), "cost": width / 64.0}
            ctx.report(step, metrics, checkpoint={"step": step})


def _dump() -> str:
    """A long error text, as a failing model's state dump: a line of 9,000 characters (more
    than an MLflow tag holds; an error keeps a log's last lines, whatever their length)."""
    norms = " ".join(f"layer{i}=inf" for i in range(900))
    return f"  grad norms: {norms}\n  (the state dump ends here)"


def held_curve(ctx: Any) -> None:
    """:func:`curve`, holding as the ``hold_*`` params of ``hyperfleet.testing.workloads`` ask."""
    from hyperfleet.testing.workloads import with_hold

    with_hold(ctx)
    curve(ctx)


DIVERGING = (1, 4)
"""The trials of :func:`diverging` whose objective blows up to 1e13."""


def diverging(ctx: Any) -> None:
    """Names that collide and values that span decades: reports its objective as ``state``
    (a column of the trials table) and ``lr`` (also a parameter), and the trials numbered in
    ``DIVERGING`` diverge to 1e13, as two trials with a too large learning rate do."""
    lr = float(ctx.params["lr"])
    bonus = 0.05 if ctx.params.get("opt") == "adam" else 0.0
    step = 0
    while step < ctx.max_steps:
        step += 1
        if ctx.should_eval(step):
            loss = 1e13 * step if ctx.trial_number in DIVERGING else 1.0 / step + lr - bonus
            ctx.report(step, {"state": loss, "lr": lr * step})
