"""The workload of the elastic resize tests: the built-in ``digits``, each report followed by a
wait of ``report_wait`` seconds on every rank (none by default).

A digits step takes about a millisecond, so a trial would report faster than a controller
ticks (every 0.1 s) and end before any resize could be decided; the wait spaces its reports
as a real trial's are spaced, and changes nothing of what it computes (a resized trial's curve
is compared with a fixed-size run's that waits for nothing). It declares what ``digits``
declares: it resumes at another size, its ``batch_size`` is the global batch.

``paced_pbt_toy`` is the PBT paper's toy (``examples/pbt_toy.py``) paced the same way: its whole
state (theta, the step) goes through its checkpoint, so it resumes at any size too.
"""

from __future__ import annotations

import os
import time
from typing import Any

import hyperfleet
from hyperfleet.testing.workloads import with_hold


def _paced(ctx: hyperfleet.TrialContext) -> None:
    """Each ``ctx.report`` of the workload followed by a wait of ``report_wait`` seconds, until
    the file ``paced_until`` names exists (a test ends the pacing once it saw what it waits
    for, so that a loaded machine cannot make the trial end first; then it runs to its end);
    and held at a report as ``hyperfleet.testing.workloads.with_hold``'s params ask."""
    wait = float(ctx.params.pop("report_wait", 0.0))
    until = str(ctx.params.pop("paced_until", "") or "")
    with_hold(ctx)
    report = ctx.report

    def report_then_wait(step: int, metrics: Any, checkpoint: Any = None) -> None:
        report(step, metrics, checkpoint=checkpoint)  # a resize's pause raises here
        if not (until and os.path.exists(until)):
            time.sleep(wait)

    ctx.report = report_then_wait  # type: ignore[method-assign]


def paced_digits(ctx: hyperfleet.TrialContext) -> None:
    from hyperfleet.trials.workloads.digits import main

    _paced(ctx)
    main(ctx)


paced_digits.hyperfleet_supports = {  # type: ignore[attr-defined]
    "resizable": True,
    "global_batch": True,
}


def paced_pbt_toy(ctx: hyperfleet.TrialContext) -> None:
    from examples.pbt_toy import main

    _paced(ctx)
    main(ctx)


paced_pbt_toy.hyperfleet_supports = {"resizable": True}  # type: ignore[attr-defined]
