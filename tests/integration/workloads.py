"""Custom workloads used by the integration tests, written against the public contract."""

from __future__ import annotations

import os
import time

import hyperfleet


def quadratic(ctx: hyperfleet.TrialContext) -> None:
    """Minimise (x - 0.3)^2 'over steps'; fails on purpose for trial 0 when asked to."""
    if ctx.params.get("fail_first") and ctx.trial_number == 0:
        raise RuntimeError("injected failure in trial 0")
    state = ctx.load_checkpoint()
    step = state["step"] if state else 0
    x = float(ctx.params["x"])
    while step < ctx.max_steps:
        step += 1
        time.sleep(float(ctx.params.get("sleep", 0.0)))
        if ctx.should_eval(step):
            loss = (x - 0.3) ** 2 + 1.0 / step
            ctx.report(step, {"loss": loss, "pid": float(os.getpid())}, checkpoint={"step": step})
