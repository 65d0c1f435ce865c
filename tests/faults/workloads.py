"""Misbehaving workloads for the fault suite, written against the public contract.

Every process appends what it does to ``params["marks"]`` (one line per event: trial, pid,
event, value), so a test can tell which processes a trial had, which steps each reported, and
whether two copies of one trial ever ran at once (each copy holds ``<marks>.trial-N.lock`` with
its pid while it runs; a copy that finds a live holder writes ``DUPLICATE``).

``params["mode"]`` picks the misbehaviour for the trials in ``params["bad"]`` (all when empty):
``nan``/``inf`` (the last report's objective), ``nan_mid`` (one intermediate report),
``hang`` (never reports), ``ignore_term`` (ignores SIGTERM), ``raise`` (raises at step 2).
``params["hold"]``: every trial waits at ``params["hold_step"]`` until that file exists.
"""

from __future__ import annotations

import math
import os
import signal
import time
from pathlib import Path
from typing import Any

import hyperfleet
from hyperfleet.spec.processes import pid_alive
from hyperfleet.testing.workloads import quadratic_loss, wait_for_file


def mark(ctx: hyperfleet.TrialContext, event: str, value: Any = "") -> None:
    with open(ctx.params["marks"], "a") as f:
        f.write(f"{ctx.trial_number} {os.getpid()} {event} {value}\n")


def _exclusive(ctx: hyperfleet.TrialContext) -> Path:
    lock = Path(f"{ctx.params['marks']}.trial-{ctx.trial_number}.lock")
    try:
        holder = int(lock.read_text())
    except (OSError, ValueError):
        holder = None
    if holder is not None and holder != os.getpid() and pid_alive(holder):
        mark(ctx, "DUPLICATE", holder)
    lock.write_text(str(os.getpid()))
    return lock


def main(ctx: hyperfleet.TrialContext) -> None:
    p = ctx.params
    bad = not p.get("bad") or ctx.trial_number in p["bad"]
    mode = p.get("mode", "ok") if bad else "ok"
    if mode == "ignore_term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    lock = _exclusive(ctx)
    mark(ctx, "start")
    state = ctx.load_checkpoint()
    step = state["step"] if state else 0
    mark(ctx, "from", step)
    if mode == "hang":
        mark(ctx, "hangs")
        while True:
            time.sleep(0.05)
    x = float(p["x"])
    while step < ctx.max_steps:
        step += 1
        if p.get("hold") and step == p.get("hold_step", 1):
            mark(ctx, "holds", step)
            wait_for_file(Path(p["hold"]), timeout=300.0)
        if mode == "raise" and step == 2:
            raise RuntimeError("injected failure")
        loss = quadratic_loss(x, step)
        if step == ctx.max_steps and mode in ("nan", "inf"):
            loss = math.nan if mode == "nan" else math.inf
        if step == 2 and mode == "nan_mid":
            loss = math.nan
        mark(ctx, "step", step)
        ctx.report(step, {"loss": loss}, checkpoint={"step": step})
    mark(ctx, "end")
    lock.unlink(missing_ok=True)


def with_defaults(ctx: hyperfleet.TrialContext) -> None:
    """Uses a parameter it declares with a default and the sweep never sets."""
    for step in range(1, ctx.max_steps + 1):
        ctx.report(step, {"loss": ctx.params["scale"] * float(ctx.params["x"]) / step})


with_defaults.hyperfleet_params = {"scale": 2.0, "x": 0.5}  # type: ignore[attr-defined]
