"""Workloads for tests, written against the public trial contract (no torch, no platform).

``quadratic`` minimises ``(x - 0.3)^2`` "over steps" (``quadratic_loss``: the value at a step),
resumes from its checkpoint, and fails trial 0 on purpose when ``params.fail_first`` is set: the
workload of :func:`hyperfleet.testing.sweeps.minimal_sweep`.

**Holding a trial.** A test that must act while a trial is mid-run (send SIGINT, kill a
worker, stop the sweep) does not race a sleeping workload: it *holds* the trial. With the params

* ``hold_file``: a path the test creates to release the trial (absent or empty: no hold),
* ``hold_at``: the first report at or past this step that returns normally holds,
* ``hold_trial``: only this trial number holds (-1 or absent: every trial),

every rank blocks right after that report until ``hold_file`` exists. Rank 0 first writes
``held_marker(hold_file, trial)`` with the held step, so the test knows the trial is held,
and where: its report is recorded (storage, checkpoint) and nothing more happens until the
test releases it or stops it (SIGTERM ends the wait like any other Python code). A trial
that reports again after the file exists does not hold. ``with_hold(ctx)`` installs this on a
context and removes the ``hold_*`` params, so the wrapped workload never sees them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "HOLD_PARAMS",
    "HOLD_TIMEOUT_S",
    "PACE_FILE",
    "held_marker",
    "quadratic",
    "quadratic_loss",
    "wait_for_file",
    "with_hold",
    "with_pace",
]

#: how long a held trial waits for its release before it fails (a test that forgot it)
HOLD_TIMEOUT_S = 600.0
HOLD_PARAMS = {"hold_file": "", "hold_at": 0, "hold_trial": -1}


def quadratic_loss(x: float, step: int) -> float:
    """``(x - 0.3)^2 + 1/step``: lowest at ``x = 0.3``, falling with every step."""
    return (x - 0.3) ** 2 + 1.0 / step


def held_marker(hold_file: str | Path, trial: int) -> Path:
    """The file a held trial's rank 0 writes (content: the held step) when its hold starts."""
    return Path(f"{hold_file}.held-{trial}")


def wait_for_file(*paths: Path, timeout: float = HOLD_TIMEOUT_S) -> None:
    """Block until one of ``paths`` exists; TimeoutError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not any(p.exists() for p in paths):
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f}s and {paths[0]} never appeared")
        time.sleep(0.02)  # polling for the test's file


def with_hold(ctx: Any) -> None:
    """Make ``ctx.report`` hold as the ``hold_*`` params ask (see the module docstring)."""
    hold_file = str(ctx.params.pop("hold_file", "") or "")
    hold_at = int(ctx.params.pop("hold_at", 0))
    hold_trial = int(ctx.params.pop("hold_trial", -1))
    if not hold_file or hold_trial not in (-1, ctx.trial_number):
        return
    release = Path(hold_file)
    report = ctx.report

    def report_then_hold(step: int, metrics: Any, checkpoint: Any = None) -> None:
        report(step, metrics, checkpoint=checkpoint)  # a prune, exploit or pause raises here
        if step < hold_at or release.exists():
            return
        if ctx.is_main:
            marker = held_marker(hold_file, ctx.trial_number)
            tmp = marker.with_name(marker.name + ".tmp")
            tmp.write_text(str(step))
            os.replace(tmp, marker)
        wait_for_file(release)

    ctx.report = report_then_hold


PACE_FILE = "paced-step"
"""Where :func:`with_pace` keeps the highest step a trial has reported (its directory)."""


def with_pace(ctx: Any, pace: Mapping[tuple[int, int], tuple[int, int]]) -> None:
    """Make ``ctx.report`` wait after chosen reports until another trial has got far enough:
    with ``pace[(trial, step)] = (other, at)``, trial ``trial``, after its report at ``step``
    returns normally, waits until trial ``other`` of the same sweep has reported step ``at``
    or later (each trial keeps the highest step it reported in its directory, ``PACE_FILE``).
    PBT tests use it so that the order in which members reach their ready checks does not
    depend on how fast each one started; a wait longer than 120 s fails the trial."""
    report = ctx.report
    workdir = Path(ctx.workdir)

    def reported(trial_dir: Path) -> int:
        try:
            return int((trial_dir / PACE_FILE).read_text())
        except (FileNotFoundError, ValueError):
            return -1

    def report_then_pace(step: int, metrics: Any, checkpoint: Any = None) -> None:
        report(step, metrics, checkpoint=checkpoint)  # an exploit, prune or pause raises here
        if ctx.is_main and step > reported(workdir):
            tmp = workdir / f"{PACE_FILE}.tmp"
            tmp.write_text(str(step))
            os.replace(tmp, workdir / PACE_FILE)
        if (ctx.trial_number, step) not in pace:
            return
        other, at = pace[(ctx.trial_number, step)]
        other_dir = workdir.parent / f"trial-{other:04d}"
        deadline = time.monotonic() + 120.0
        while reported(other_dir) < at:
            if time.monotonic() > deadline:
                raise TimeoutError(f"trial {other} did not report step {at} within 120 s")
            time.sleep(0.02)  # polling another trial's file

    ctx.report = report_then_pace


def quadratic(ctx: Any) -> None:
    """Minimise (x - 0.3)^2 'over steps'; fails on purpose for trial 0 when asked to."""
    with_hold(ctx)
    if ctx.params.get("fail_first") and ctx.trial_number == 0:
        raise RuntimeError("injected failure in trial 0")
    state = ctx.load_checkpoint()
    step = state["step"] if state else 0
    x = float(ctx.params["x"])
    while step < ctx.max_steps:
        step += 1
        if ctx.should_eval(step):
            loss = quadratic_loss(x, step)
            ctx.report(step, {"loss": loss, "pid": float(os.getpid())}, checkpoint={"step": step})
