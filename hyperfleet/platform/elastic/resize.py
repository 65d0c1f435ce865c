"""The resize policy of elastic trials: which running trial grows or shrinks, and to what size.

An elastic trial (``trial.resources.devices: {min, max}``, :mod:`hyperfleet.spec.resources`)
holds between ``min`` and ``max`` devices. :func:`decide` is the pool's policy over them, pure:
it takes the free devices, the device needs of the trials waiting for devices (in queue order)
and the running elastic trials, and returns the resizes to make. It touches no process, lease
or storage row; its caller (the controller, or the simulation of
``benchmarks/bench_elastic.py``) applies each resize at the trial's next report -- the trial
checkpoints, its processes end and it is relaunched at its new size from that checkpoint -- and
counts the trial's size as its new one from the decision on (:class:`ElasticTrial`'s
``pending``), so a later decision neither offers the same devices twice nor takes them twice.

The rules, in order:

1. **The queue first.** Waiting trials take the free devices in queue order. When one does not
   fit, elastic trials above their ``min`` give devices back, **lowest-ranked first**, each
   just enough (never below ``min``) until it fits. When every elastic trial's spare devices
   together would not make it fit, none gives any: devices taken back that no trial can use
   would only idle. The queue is served in order: a trial that cannot be made to fit stops the
   decision there, and no trial grows while any waits.
2. **Idle devices to the best, shared.** With no trial waiting, the free devices are offered
   to elastic trials below their ``max``, **best-ranked first**: each grows to the largest size
   it may run at within its ``max`` and its share of the devices left -- ``share`` of them
   (rounded up) while a trial after it could take some too, all of them for the last. With
   the default share of one half the best-ranked takes half, the next a quarter, and so on:
   the survivors of a sweep's tail are spread wider, so each reports sooner and devices that
   fall idle later reach one of them sooner (devices promised to a trial idle until its next
   report), and the ranks, a noisy guide early on, are hedged. ``share: 1`` gives every
   device the best-ranked trial may take to it.
3. **No thrashing.** A trial resizes at most once per ``min_interval`` of its reports (counted
   since its launch or its last resize), and a trial whose resize is still pending is left
   alone -- except that a pending growth may be enlarged by devices that fell idle since (it
   is still one resize, made at the trial's next report).

The rank of a trial is its rung first (the furthest rung of a successive-halving scheduler it
reached: higher is better; 0 for a scheduler without rungs), then its latest value of the
objective (``score``: signed so that higher is better; a trial with none yet ranks below those
with one), then its age (a lower trial number first). A trial may run only at the sizes in its
``sizes`` (a global batch that must divide evenly over the ranks rules some out); by default
at any size between its ``min`` and ``max``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hyperfleet.platform.config.model import ElasticPolicyConfig


@dataclass(frozen=True)
class ElasticKnobs:
    """The policy's settings (the pool's: every sweep a worker serves shares them)."""

    enabled: bool = True
    """False: no resize is ever decided (elastic trials stay at the size they launched at)."""
    min_interval: int = 3
    """Reports a trial makes between two of its resizes (at least 1)."""
    share: float = 0.5
    """Of the idle devices offered, the most one trial grows by while a lower-ranked trial
    could take some too (rounded up; above 0, at most 1: 1 gives the best-ranked all)."""

    @classmethod
    def of(cls, policy: ElasticPolicyConfig) -> ElasticKnobs:
        """The settings a sweep file's ``elastic:`` section gives."""
        return cls(enabled=policy.enabled, min_interval=policy.min_interval, share=policy.share)

    def __post_init__(self) -> None:
        if self.min_interval < 1:
            raise ValueError(f"min_interval must be at least 1 (got {self.min_interval})")
        if not 0 < self.share <= 1:
            raise ValueError(f"share must be above 0 and at most 1 (got {self.share})")


@dataclass(frozen=True)
class ElasticTrial:
    """A running elastic trial as the policy sees it."""

    trial: int
    """Its number (ties of rank go to the lower one)."""
    size: int
    """Devices it holds, or will hold once a pending resize is made."""
    low: int
    """Its ``min`` devices."""
    high: int
    """Its ``max`` devices."""
    rung: int = 0
    """The furthest rung it reached (higher is better)."""
    score: float | None = None
    """Its latest objective value, signed so that higher is better; None: no report yet."""
    reports_since_resize: int = 0
    """Reports since its launch or its last resize."""
    pending: bool = False
    """A resize decided earlier is not made yet (it waits for the trial's next report)."""
    growing: bool = False
    """That pending resize grows the trial (``size`` is then the size it grows to)."""
    sizes: tuple[int, ...] = field(default=())
    """The sizes it may run at; empty: every size from ``low`` to ``high``."""

    def allowed(self) -> list[int]:
        """The sizes it may run at, ascending."""
        if self.sizes:
            return sorted(s for s in self.sizes if self.low <= s <= self.high)
        return list(range(self.low, self.high + 1))

    def rank_key(self) -> tuple[int, int, float, int]:
        """Sorts best-ranked first (rung, then score, then age)."""
        scored = self.score is not None
        return (-self.rung, 0 if scored else 1, -(self.score or 0.0), self.trial)


@dataclass(frozen=True)
class Resize:
    """A decision: ``trial`` goes from ``before`` to ``after`` devices at its next report
    (``before``: its size as the policy saw it, a pending growth's target included)."""

    trial: int
    before: int
    after: int

    @property
    def grows(self) -> bool:
        return self.after > self.before


def _eligible(trials: Sequence[ElasticTrial], knobs: ElasticKnobs) -> list[ElasticTrial]:
    return [
        t
        for t in trials
        if not t.pending and t.reports_since_resize >= knobs.min_interval and t.high > t.low
    ]


def _shrunk_size(t: ElasticTrial, deficit: int) -> int:
    """The size ``t`` keeps when asked for ``deficit`` devices: the largest it may run at that
    frees at least ``deficit``, or its smallest when none does."""
    allowed = [s for s in t.allowed() if s < t.size]
    enough = [s for s in allowed if t.size - s >= deficit]
    return max(enough) if enough else min(allowed, default=t.size)


def _serve_queue(free: int, waiting: Sequence[int], donors: list[ElasticTrial]) -> list[Resize]:
    """Rule 1: the shrinks that make the waiting trials fit, in queue order (each donor's
    devices taken down to its smallest size before the next donor's)."""
    kept = {t.trial: t.size for t in donors}
    for need in waiting:
        if need <= free:
            free -= need
            continue
        spare = sum(kept[t.trial] - min(t.allowed()) for t in donors)
        if free + spare < need:
            break
        for t in donors:
            if free >= need:
                break
            now = replace(t, size=kept[t.trial])
            kept[t.trial] = _shrunk_size(now, need - free)
            free += now.size - kept[t.trial]
        free -= need
    return [Resize(t.trial, t.size, kept[t.trial]) for t in donors if kept[t.trial] < t.size]


def _grow(free: int, takers: list[ElasticTrial], share: float) -> list[Resize]:
    """Rule 2: the free devices to the best-ranked trials below their max, each its share of
    those left while a trial after it could take some."""
    resizes: list[Resize] = []
    for i, t in enumerate(takers):
        if free <= 0:
            break
        last = i == len(takers) - 1
        offered = free if last else max(1, math.ceil(free * share))
        larger = [s for s in t.allowed() if t.size < s <= t.size + offered]
        if larger:
            resizes.append(Resize(t.trial, t.size, max(larger)))
            free -= max(larger) - t.size
    return resizes


def decide(
    free: int,
    waiting: Sequence[int],
    trials: Sequence[ElasticTrial],
    knobs: ElasticKnobs | None = None,
) -> list[Resize]:
    """The resizes to make now (see the module docstring).

    ``free``: devices no trial holds or is promised; ``waiting``: the devices each trial
    waiting to start needs, in queue order; ``trials``: the running elastic trials.
    """
    knobs = knobs or ElasticKnobs()
    if not knobs.enabled:
        return []
    eligible = sorted(_eligible(trials, knobs), key=ElasticTrial.rank_key)
    donors = [t for t in reversed(eligible) if t.size > min(t.allowed(), default=t.size)]
    if waiting:
        return _serve_queue(free, waiting, donors)
    growing = [t for t in trials if t.pending and t.growing and t.size < t.high]
    takers = sorted([*eligible, *growing], key=ElasticTrial.rank_key)
    return _grow(free, [t for t in takers if t.size < t.high], knobs.share)
