"""Workloads of the MLflow tests: they wait on files the test creates, never on the clock.

``gated`` minimises ``(x - 0.3)^2`` "over steps" and reports five metrics at every step. At
step ``hold_at`` it writes ``<gates>/held-<trial>`` and waits until ``<gates>/go-<trial>`` or
``<gates>/go`` exists, so a test can stop or restart the tracking server, or interrupt the
sweep, while a trial is known to be at a given step. ``x >= fail_above`` fails on purpose.
At its end it writes the MLflow modules its process imported to ``<gates>/modules-<trial>``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hyperfleet.testing.workloads import quadratic_loss, wait_for_file


def gated(ctx: Any) -> None:
    x = float(ctx.params["x"])
    if x >= float(ctx.params.get("fail_above", 2.0)):
        raise RuntimeError(f"injected failure: x = {x}")
    gates = Path(str(ctx.params.get("gates", ".")))
    hold_at = int(ctx.params.get("hold_at", 0))
    state = ctx.load_checkpoint()
    step = int(state["step"]) if state else 0
    while step < ctx.max_steps:
        step += 1
        loss = quadratic_loss(x, step)
        metrics = {"loss": loss, "acc": 1.0 - loss / 2, "x2": x * x, "lr": 0.01, "speed": 1.0 + x}
        ctx.report(step, metrics, checkpoint={"step": step})
        if step == hold_at:
            (gates / f"held-{ctx.trial_number}").touch()
            wait_for_file(gates / f"go-{ctx.trial_number}", gates / "go")
    mlflow = sorted(m for m in sys.modules if m == "mlflow" or m.startswith("mlflow."))
    (gates / f"modules-{ctx.trial_number}").write_text("\n".join(mlflow))


gated.hyperfleet_params = {"x": 0.5, "gates": ".", "hold_at": 0, "fail_above": 2.0}
