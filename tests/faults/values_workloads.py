"""Workloads that report bad values, for ``tests/faults/test_values.py``.

They keep the marks of ``tests/faults/workloads.py`` (one line per event in
``params["marks"]``: trial, pid, event, value; ``DUPLICATE`` when two copies of a trial run at
once) and checkpoint ``{"step": step}`` at every report. ``params["mode"]`` picks the
misbehaviour for the trials in ``params["bad"]`` (all when empty):

* ``bad_value``: step 2 reports ``{"loss": V}`` with its checkpoint, V by trial number:
  ``"abc"``, ``None``, ``10**400``;
* ``late``: after the last report, a thread reports ``loss = 999`` 0.2 s after ``main``
  returned (marked ``late``: the step and how that call ended);
* ``numpy``: every checkpoint holds a ``numpy.float64`` and a NumPy array; the first attempt
  crashes after step 2, the retry resumes from there (marks ``resumed`` with their types);
* ``exit``: ``sys.exit(0)`` right after the report of step 2;
* ``legacy``: the first attempt leaves a checkpoint of step 1 as a version that did not convert
  NumPy values wrote it (``torch.save`` of a ``numpy.float64``, with its checksum), then
  crashes; the retry's ``load_checkpoint`` meets torch's ``UnpicklingError``, whose message
  holds terminal escape codes.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import numpy as np
import torch

import hyperfleet
from hyperfleet.testing.workloads import quadratic_loss
from hyperfleet.trials.files import sha256_file
from tests.faults.workloads import _exclusive, mark

BAD_VALUES: list[Any] = ["abc", None, 10**400]


def _checkpoint(mode: str, step: int, loss: float) -> dict[str, Any]:
    if mode != "numpy":
        return {"step": step}
    return {"step": step, "opt": {"extra": [1, 2, np.float64(loss)]}, "arr": np.arange(3.0)}


def _late(ctx: hyperfleet.TrialContext, step: int) -> None:
    def report() -> None:
        time.sleep(0.2)
        try:
            ctx.report(step + 1, {"loss": 999.0}, checkpoint={"step": step + 1})
            mark(ctx, "late", f"{step + 1} returned")
        except Exception as exc:
            mark(ctx, "late", f"{step + 1} {type(exc).__name__}: {exc}")
            raise

    threading.Thread(target=report, daemon=True).start()


def _legacy_checkpoint(ctx: hyperfleet.TrialContext, step: int) -> None:
    path = ctx.checkpoints.path(step)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"step": step, "lr": np.float64(0.1)}, path)
    path.with_suffix(".sha256").write_text(sha256_file(path))


def main(ctx: hyperfleet.TrialContext) -> None:
    p = ctx.params
    bad = not p.get("bad") or ctx.trial_number in p["bad"]
    mode = p.get("mode", "ok") if bad else "ok"
    lock = _exclusive(ctx) if ctx.is_main else None  # rank 0 reports; the others follow
    try:
        mark(ctx, "start")
        state = ctx.load_checkpoint()
        step = state["step"] if state else 0
        mark(ctx, "from", step)
        if state is not None and mode == "numpy":
            kinds = (type(state["opt"]["extra"][2]).__name__, type(state["arr"]).__name__)
            mark(ctx, "resumed", ",".join(kinds))
        x = float(p["x"])
        while step < ctx.max_steps:
            step += 1
            if mode == "numpy" and state is None and step == 3:
                raise RuntimeError("injected crash after a checkpoint with NumPy values")
            if mode == "legacy" and step == 2:
                _legacy_checkpoint(ctx, 1)
                raise RuntimeError("injected crash after a legacy checkpoint")
            time.sleep(float(p.get("step_s", 0)))
            loss: Any = quadratic_loss(x, step)
            if mode == "bad_value" and step == 2:
                loss = BAD_VALUES[ctx.trial_number % len(BAD_VALUES)]
            if ctx.is_main:
                mark(ctx, "step", step)
            ctx.report(step, {"loss": loss}, checkpoint=_checkpoint(mode, step, float(step)))
            if mode == "exit" and step == 2:
                mark(ctx, "exits", step)
                sys.exit(0)
        if mode == "late":
            _late(ctx, step)
        mark(ctx, "end")
    finally:  # a failed copy's pool worker lives on: the lock goes with the trial
        if lock is not None:
            lock.unlink(missing_ok=True)
