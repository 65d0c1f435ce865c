"""The fencing tests' workload: a step of ``params["sleep"]`` seconds, a checkpoint at every
report, and a mark once storage has *accepted* each report (``trial pid step N HOST``, in the
format of ``tests/faults/workloads.py``, the host telling apart pids of two pid namespaces), so
a test can tell which process a trial's record holds each step from. ``params["hold"]``: the
first copy of a trial waits at step 3 until that file exists (a test starts its other workers
meanwhile); ``params["hold_resumed"]``: a copy that resumed from a checkpoint waits 3 steps
after it until that file exists (a test lets the superseded copy stop meanwhile);
``params["hold_first"]``: a copy that started afresh waits at step 8 until that file exists (a
test pauses it there, mid-trial, however slowly it polls)."""

from __future__ import annotations

import os
import socket
import time

import hyperfleet
from hyperfleet.testing.workloads import quadratic_loss
from tests.faults.workloads import mark


def _held(path: str | None) -> bool:
    return bool(path) and not os.path.exists(str(path))


def main(ctx: hyperfleet.TrialContext) -> None:
    state = ctx.load_checkpoint()
    step = state["step"] if state else 0
    mark(ctx, "from", f"{step} {socket.gethostname()}")
    x = float(ctx.params["x"])
    start = step
    while step < ctx.max_steps:
        step += 1
        time.sleep(float(ctx.params["sleep"]))
        while step == 3 and _held(ctx.params.get("hold")):
            time.sleep(0.05)
        while state is not None and step == start + 3 and _held(ctx.params.get("hold_resumed")):
            time.sleep(0.05)
        while state is None and step == 8 and _held(ctx.params.get("hold_first")):
            time.sleep(0.05)
        ctx.report(step, {"loss": quadratic_loss(x, step)}, checkpoint={"step": step})
        mark(ctx, "step", f"{step} {socket.gethostname()}")  # once the report was accepted
    mark(ctx, "end")
