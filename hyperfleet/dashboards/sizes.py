"""A trial's sizes as the dashboard shows them: the devices each launch held, and the ranks its
reports ran at.

* A **launch** is what one start of the trial's processes held: its lease (``hf_leases``), or
  the leases that a gang of several hosts held together (leases of one trial that were all
  open at once). An elastic trial is relaunched at each resize (its lease closed PAUSED, a
  lease of the new size opened), so each size it ran at is a launch of its own.
* A **resize** is a launch whose devices differ from the trial's launch before it; the
  Devices timeline marks it at the new launch's start (the relaunch at the new size).
* ``hf_trials.sizes`` holds the ranks the trial's reports ran at, one ``[first step, ranks]``
  pair per size (:attr:`~hyperfleet.platform.storage.TrialRecord.sizes`); a trial's details
  print it for an elastic trial (``1 → 2 → 4 → 2 ranks, from steps 1, 40, 70, 100``). It also
  holds the sizes a trial of a node range continued at after losing a node, which happen within
  one launch and so show in no lease.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from hyperfleet.platform.config.model import SweepConfig
from hyperfleet.platform.storage import LeaseRecord, TrialRecord


@dataclass(frozen=True)
class Launch:
    """One launch of a trial: its leases, when it started and the devices they held."""

    trial: int
    start: float
    leases: tuple[int, ...]  # lease ids
    devices: int
    before: int | None  # the devices of the trial's launch before it (None: its first)

    @property
    def resized(self) -> bool:
        return self.before is not None and self.before != self.devices


def launches(leases: Sequence[LeaseRecord]) -> list[Launch]:
    """Every launch of every trial, by trial and start; a lease that starts while each of
    the current launch's leases is open joins it (a gang's hosts), any other starts the next."""
    by_trial: dict[int, list[LeaseRecord]] = {}
    for lease in sorted(leases, key=lambda x: (x.started_at, x.id)):
        by_trial.setdefault(lease.trial, []).append(lease)
    out: list[Launch] = []
    for trial, held in sorted(by_trial.items()):
        groups: list[list[LeaseRecord]] = []
        for lease in held:
            group = groups[-1] if groups else []
            ends = [math.inf if g.ended_at is None else g.ended_at for g in group]
            if group and lease.started_at < min(ends):
                group.append(lease)
            else:
                groups.append([lease])
        before: int | None = None
        for group in groups:
            devices = sum(len(g.devices) for g in group)
            ids = tuple(g.id for g in group)
            out.append(Launch(trial, group[0].started_at, ids, devices, before))
            before = devices
    return out


def resizes(leases: Sequence[LeaseRecord]) -> list[Launch]:
    """The launches that changed their trial's size, by start."""
    return sorted((x for x in launches(leases) if x.resized), key=lambda x: x.start)


def devices_text(devices: int, before: int | None = None) -> str:
    """``2 devices (resized from 1)``; ``1 device`` for a launch that kept its trial's size."""
    text = f"{devices} device{'' if devices == 1 else 's'}"
    return text if before is None or before == devices else f"{text} (resized from {before})"


def is_elastic(config: SweepConfig) -> bool:
    """Whether the sweep's trials may change their size: a device range or a node range."""
    resources = config.trial.resources
    return bool(resources.elastic or resources.elastic_nodes)


def sizes_text(record: TrialRecord | None, config: SweepConfig) -> str | None:
    """``1 → 2 → 4 → 2 ranks, from steps 1, 40, 70, 100`` for a trial that ran at several
    sizes or may (an elastic sweep's); ``1 rank (not resized)`` for an elastic trial that kept
    its size; None for a fixed trial, and for one whose sizes are not recorded."""
    sizes = record.sizes if record is not None else None
    if not sizes or (len(sizes) == 1 and not is_elastic(config)):
        return None
    ranks = [int(r) for _, r in sizes]
    unit = "rank" if ranks == [1] else "ranks"
    if len(sizes) == 1:
        return f"{ranks[0]} {unit} (not resized)"
    steps = ", ".join(str(int(step)) for step, _ in sizes)
    return f"{' → '.join(map(str, ranks))} {unit}, from steps {steps}"
