"""Custom workloads used by the integration tests, written against the public contract.

``quadratic`` and the hold machinery (``with_hold``: a trial that waits after a given report
until the test creates a file) live in :mod:`hyperfleet.testing.workloads`; ``quadratic`` is
importable from here too, as sweep files name ``tests.integration.workloads:quadratic``. The
workloads below are built-in ones that hold as the ``hold_*`` params ask.
"""

from __future__ import annotations

import hyperfleet
from hyperfleet.testing.workloads import quadratic, with_hold

__all__ = ["held_digits", "held_pbt_toy", "quadratic"]


def held_digits(ctx: hyperfleet.TrialContext) -> None:
    """The digits workload, holding as the ``hold_*`` params ask (a trial that is mid-run, at
    a checkpoint, for as long as the test needs, however fast the machine trains)."""
    from hyperfleet.trials.workloads.digits import main

    with_hold(ctx)
    main(ctx)


def held_pbt_toy(ctx: hyperfleet.TrialContext) -> None:
    """``examples/pbt_toy.py``, holding as the ``hold_*`` params ask."""
    from examples.pbt_toy import main

    with_hold(ctx)
    main(ctx)
