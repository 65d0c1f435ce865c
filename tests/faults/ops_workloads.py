"""Workloads for the operations faults (issue #26, findings 4 and 6), beside the fault suite's
own (``tests/faults/workloads.py``, whose marks, lock and hold they reuse).

``params["mode"]``:

* ``spawn`` — before its first report the trial starts ``sleep 301`` and forks a child that
  sleeps too; both pids are marked (``child``), and every child of its process (``kin``: its
  worker's guard too), then the trial goes on as usual;
* ``report_then_sleep`` — after reporting ``params["marker_step"]`` the trial marks
  ``reported`` and sleeps (the test kills it there, then touches ``<marks>.killed-N``); the
  relaunch resumes after that step and runs through, so only the killed copy reported it.

Any other mode runs :func:`tests.faults.workloads.main`.
"""

from __future__ import annotations

import os
import subprocess
import time

import psutil

import hyperfleet
from hyperfleet.testing.workloads import quadratic_loss
from tests.faults import workloads
from tests.faults.workloads import mark


def _spawn(ctx: hyperfleet.TrialContext) -> None:
    sleeper = subprocess.Popen(["sleep", "301"])
    mark(ctx, "child", sleeper.pid)
    pid = os.fork()
    if pid == 0:  # the forked child: sleeps, never returns to the trial
        time.sleep(301)
        os._exit(0)
    mark(ctx, "child", pid)
    for kin in psutil.Process().children():  # and whatever else its process holds (a guard)
        mark(ctx, "kin", kin.pid)


def _report_then_sleep(ctx: hyperfleet.TrialContext) -> None:
    p = ctx.params
    lock = workloads._exclusive(ctx)
    mark(ctx, "start")
    state = ctx.load_checkpoint()
    step = state["step"] if state else 0
    mark(ctx, "from", step)
    first = not os.path.exists(f"{p['marks']}.killed-{ctx.trial_number}")
    while step < ctx.max_steps:
        step += 1
        loss = quadratic_loss(float(p["x"]), step)
        mark(ctx, "step", step)
        ctx.report(step, {"loss": loss}, checkpoint={"step": step})
        if first and step == p["marker_step"]:
            mark(ctx, "reported", step)
            time.sleep(300)  # killed here by the test
    mark(ctx, "end")
    lock.unlink(missing_ok=True)


def main(ctx: hyperfleet.TrialContext) -> None:
    mode = ctx.params.get("mode", "ok")
    if mode == "spawn":
        _spawn(ctx)
    if mode == "report_then_sleep":
        _report_then_sleep(ctx)
        return
    workloads.main(ctx)
