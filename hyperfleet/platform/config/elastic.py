"""What an elastic trial (``trial.resources.devices: {min, max}``, or ``nodes: {min, max}``)
needs of the rest of the file.

The range itself is checked where it is read (:mod:`hyperfleet.spec.resources`: 1 <= min <=
max, one host, whole devices). Here, what needs the other fields: the trial must resume
exactly at another size -- a function workload that declares ``resizable`` in its
``hyperfleet_supports`` (its state goes through ``ctx.state``/``ctx.restore``; the built-ins
do), or a script trial whose file says ``trial.resizable: true`` --, its ranks must form a
plain data-parallel group (the data axis is what follows the size), and a global batch must
split at both ends of the range. Each problem is one line naming the field and the fix.

:func:`elastic_sizes` gives the sizes a trial may run at, what the resize policy
(:mod:`hyperfleet.platform.elastic.resize`, ``ElasticTrial.sizes``) chooses among: every size of
the range, less those a global batch does not split evenly over.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from hyperfleet.spec.trial import TrialConfig
from hyperfleet.spec.workloads import WorkloadSupports


def _where(t: TrialConfig) -> tuple[str, str]:
    """The elastic field as the file gave it, and the fix that keeps the trial at one size."""
    r = t.resources
    if r.elastic_nodes:
        return (
            f"trial.resources.nodes: {{min: {r.min_nodes}, max: {r.nodes}}}",
            "or give nodes an int (every node to the end)",
        )
    return (
        f"trial.resources.devices: {{min: {r.devices}, max: {r.max_devices}}}",
        "or give devices an int (a fixed size)",
    )


def resizable_problems(t: TrialConfig, supports: WorkloadSupports | None) -> list[str]:
    """``trial.resizable`` against the kind of trial, and an elastic trial's program or
    workload against its declaration (``supports``: the workload's; None for a script)."""
    if t.command is None and t.resizable:
        return [
            "trial.resizable: declares that a program (trial.command) resumes at another size; "
            "a workload declares it as hyperfleet_supports = {'resizable': True}: remove it"
        ]
    if t.resources.max_devices is None and not t.resources.elastic_nodes:
        return []
    where, fixed = _where(t)
    if t.command is not None and not t.resizable:
        return [
            f"{where} relaunches the program at other sizes, which it must resume at (from "
            f"${{checkpoint_dir}}, at any WORLD_SIZE); say so with trial.resizable: true, {fixed}"
        ]
    if supports is not None and not supports.resizable:
        return [
            f"{where} needs a workload that resumes at another size; {t.workload!r} does not "
            f"declare it: keep its state in ctx.state/ctx.restore and declare "
            f"hyperfleet_supports = {{'resizable': True}}, {fixed}"
        ]
    return []


def elastic_layout_problems(
    t: TrialConfig, supports: WorkloadSupports, params: Mapping[str, Any]
) -> list[str]:
    """A function workload's elastic trial: a data-parallel group whose global batch, when the
    workload splits one, divides at its largest size too (its smallest is checked as any
    trial's is)."""
    r = t.resources
    if not r.elastic and not r.elastic_nodes:
        return []
    where, fixed = _where(t)
    if t.sync.mode == "async-ps":
        return [f"{where}: async-ps gives its ranks fixed roles; use sync.mode allreduce, {fixed}"]
    if t.parallel.pipeline > 1:
        return [
            f"{where}: an elastic trial's size is its data axis; use parallel.pipeline: 1, {fixed}"
        ]
    batch = _batch(supports, params)
    if batch is None:
        return []
    if r.elastic_nodes:
        per_node = r.devices // r.nodes
        sizes = [per_node * n for n in range(r.min_nodes or r.nodes, r.nodes + 1)]
        bad = next((s for s in sizes if batch % (s * t.grad_accum)), None)
        if bad is not None:
            return [
                f"trial.params.batch_size: {batch} is not divisible by {bad} ranks x grad_accum "
                f"{t.grad_accum} (an elastic trial's global batch splits at every number of "
                f"nodes it may run on); use a multiple of {math.lcm(*sizes) * t.grad_accum}"
            ]
        return []
    parts = (r.max_devices or 1) * t.grad_accum
    if batch % parts:
        return [
            f"trial.params.batch_size: {batch} is not divisible by max devices x grad_accum = "
            f"{parts} (an elastic trial's global batch splits at every size it runs at); use "
            f"a multiple of {parts}"
        ]
    return []


def _batch(supports: WorkloadSupports, params: Mapping[str, Any]) -> int | None:
    if not supports.global_batch or "batch_size" not in params:
        return None
    try:
        return int(params["batch_size"])
    except (TypeError, ValueError):
        return None


def elastic_sizes(
    t: TrialConfig, supports: WorkloadSupports, params: Mapping[str, Any]
) -> tuple[int, ...]:
    """The sizes the trial may run at for its merged ``params``: its range, less the sizes
    ``s`` whose ``s x grad_accum`` does not divide a global ``batch_size``."""
    batch = _batch(supports, params)
    sizes = t.resources.sizes
    if batch is None or t.command is not None:
        return tuple(sizes)
    return tuple(s for s in sizes if batch % (s * t.grad_accum) == 0)
