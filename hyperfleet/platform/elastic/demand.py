"""How many worker jobs an elastic pool submits now: the decision, pure, over storage's records.

The queued work of each active sweep of the pool is the trials that could run at once:
``min(budget.max_concurrent, running + waiting + paused + still to suggest)`` (the last is
``budget.trials`` less the trials made so far; without ``budget.trials`` the sweep wants its
``max_concurrent``). A trial needs ``resources.nodes`` workers each holding
``devices / nodes`` devices (an in-process ``devices: 0`` trial holds one slot), so a worker of
``capacity`` slots runs ``capacity // per_node`` of them; a sweep that needs more per node than
one worker has is left out (and said why). Sweeps are taken by ``budget.priority`` then name:
the order in which a limited pool's workers serve them (the workers themselves choose by the
same order).

The pool wants ``max(min_workers, the sum of each sweep's workers)``, has its alive jobs
(pending or running, as ``squeue`` says) and the pool's live workers it did not start, and
submits the difference, never so many that its alive jobs exceed ``max_workers``.

A job that ended without its worker ever registering (it failed at start, or the pool cancelled
it after it pended past ``--start-timeout``) is a *start failure*. After ``k`` of them in a
row the pool submits nothing until ``base * 2**(k-1)`` seconds (at most ``cap``) after the last
one; a job whose worker registered resets the count. The count is read from ``hf_workers``
each time, so a pool run from cron (``--once``) backs off as a long-running one does.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.elastic import BACKOFF_BASE_S, BACKOFF_CAP_S
from hyperfleet.platform.storage.records import TrialRecord, WorkerRecord
from hyperfleet.spec.states import TrialState, WorkerState


@dataclass(frozen=True)
class SweepDemand:
    """What one sweep asks of the pool."""

    name: str
    priority: int
    wanted: int  # trials that could run at once now
    nodes: int  # workers one trial spans
    per_node: int  # devices one trial holds on each node (0: an in-process trial)


def sweep_demand(cfg: SweepConfig, trials: Iterable[TrialRecord]) -> SweepDemand:
    """The sweep's queued work (see the module docstring)."""
    counts = {state: 0 for state in TrialState}
    made = 0
    for t in trials:
        counts[t.state] += 1
        made += 1
    budget, r = cfg.budget, cfg.trial.resources
    unmade = budget.max_concurrent if budget.trials is None else max(0, budget.trials - made)
    active = (
        counts[TrialState.RUNNING] + counts[TrialState.WAITING] + counts[TrialState.PAUSED] + unmade
    )
    return SweepDemand(
        name=cfg.name,
        priority=budget.priority,
        wanted=min(budget.max_concurrent, active),
        nodes=r.nodes,
        per_node=r.devices // r.nodes,
    )


def workers_wanted(demands: Sequence[SweepDemand], capacity: int | None) -> tuple[int, list[str]]:
    """Workers the sweeps need (``capacity``: slots of one worker, None when unknown: one
    trial per worker), and one line per sweep no worker of that capacity can hold."""
    total, unfit = 0, []
    for d in sorted(demands, key=lambda d: (-d.priority, d.name)):
        slots = max(d.per_node, 1)
        per_worker = 1 if capacity is None else capacity // slots
        if per_worker == 0:
            unfit.append(
                f"sweep {d.name}: a trial needs {slots} devices per node and the pool's workers "
                f"have {capacity}; pass --devices with more"
            )
            continue
        total += math.ceil(d.wanted * d.nodes / per_worker)
    return total, unfit


def to_submit(
    wanted: int, alive_jobs: int, other_workers: int, min_workers: int, max_workers: int
) -> int:
    """Jobs to submit now: the pool's target less what it has, within ``max_workers`` jobs."""
    target = max(min_workers, wanted)
    return max(0, min(target - alive_jobs - other_workers, max_workers - alive_jobs))


def start_failures(rows: Sequence[WorkerRecord], pool: str) -> list[float]:
    """When each of the pool's latest start failures in a row happened, oldest first: its
    submitted jobs' rows (host empty) that ended while no worker of that job registered, back
    to the latest job whose worker did."""
    started = {w.job_id for w in rows if w.host and w.job_id is not None}
    submitted = [w for w in rows if not w.host and w.job_id is not None and w.pool == pool]
    failures: list[float] = []
    for w in sorted(submitted, key=lambda w: w.started_at, reverse=True):
        if w.job_id in started:
            break
        if w.state == WorkerState.STOPPED:
            failures.append(w.heartbeat_at)
    return failures[::-1]


def retry_at(
    failures: Sequence[float], base: float = BACKOFF_BASE_S, cap: float = BACKOFF_CAP_S
) -> float | None:
    """The time before which the pool submits nothing, after ``failures`` (start failures in
    a row, oldest first); None when there are none."""
    if not failures:
        return None
    return failures[-1] + min(cap, base * 2 ** (len(failures) - 1))
