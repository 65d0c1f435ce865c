"""Custom workloads used by the integration tests, written against the public contract.

``quadratic`` and the hold machinery (``with_hold``: a trial that waits after a given report
until the test creates a file) live in :mod:`hyperfleet.testing.workloads`; ``quadratic`` is
importable from here too, as sweep files name ``tests.integration.workloads:quadratic``. The
workloads below are built-in ones that hold as the ``hold_*`` params ask.
"""

from __future__ import annotations

import hyperfleet
from hyperfleet.spec.workloads import BUILTIN
from hyperfleet.testing.workloads import held_marker, quadratic, wait_for_file, with_hold

__all__ = ["held_digits", "held_pbt_toy", "memory_share", "quadratic"]


def held_digits(ctx: hyperfleet.TrialContext) -> None:
    """The digits workload, holding as the ``hold_*`` params ask (a trial that is mid-run, at
    a checkpoint, for as long as the test needs, however fast the machine trains)."""
    from hyperfleet.trials.workloads.digits import main

    with_hold(ctx)
    main(ctx)


# digits' own declaration: held, it still resumes at another size (an elastic trial)
held_digits.hyperfleet_supports = BUILTIN["digits"].supports  # type: ignore[attr-defined]


def held_pbt_toy(ctx: hyperfleet.TrialContext) -> None:
    """``examples/pbt_toy.py``, holding as the ``hold_*`` params ask."""
    from examples.pbt_toy import main

    with_hold(ctx)
    main(ctx)


def memory_share(ctx: hyperfleet.TrialContext) -> None:
    """Holds a block of ``alloc`` of its GPU's whole memory through its reports, holding as
    the ``hold_*`` params ask; the loss is the step's inverse. Trial ``greedy_trial`` asks
    ``greedy`` instead (more than its share of a shared device), once the other trials below
    ``sharers`` hold theirs."""
    import torch

    hold_file = str(ctx.params.get("hold_file", ""))
    with_hold(ctx)
    greedy = ctx.trial_number == int(ctx.params["greedy_trial"])
    if greedy and hold_file:
        others = [n for n in range(int(ctx.params["sharers"])) if n != ctx.trial_number]
        for n in others:
            wait_for_file(held_marker(hold_file, n))
    fraction = float(ctx.params["greedy" if greedy else "alloc"])
    total = torch.cuda.get_device_properties(ctx.device).total_memory
    block = torch.ones(int(fraction * total) // 4, device=ctx.device)  # float32: 4 bytes
    for step in range(1, ctx.max_steps + 1):
        ctx.report(step, {"loss": float(block[-1].item()) / step})
