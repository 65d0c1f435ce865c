"""Elastic trials resized by their worker: the policy run over the worker's pool, each decision
carried to the trial at its next report, the trial relaunched at its new size.

After each tick's launches the controller's :class:`Resizer` hands
:func:`~hyperfleet.platform.elastic.resize.decide` the pool's free devices, the device needs
of the sweeps whose next trial waits for devices (in the order the controller serves them: a
sweep waits when its next trial does not fit in the free devices and its scheduler still has
a trial for it) and the running elastic trials: their size, range and allowed sizes
(:func:`~hyperfleet.platform.config.elastic.elastic_sizes`), rank (the furthest rung of
successive halving, ``Scheduler.rung``, then the latest objective value) and the reports seen
since their launch (a report is seen as a change of the trial's last step between two ticks:
reports closer together than a tick count once, so a trial resizes after *at least*
``min_interval`` reports).

A decision (:class:`Pending`) is carried to the trial through its directory
(:mod:`hyperfleet.platform.elastic.requests`); a growth reserves the devices it will take at
once (leased from the pool, held idle until the resize), so no other trial takes them. At the
trial's next report with a checkpoint its rank 0 answers PAUSE and its processes end; the
driver (:func:`relaunched`, from ``SweepDriver._end``) then tells the resize from a PBT pause by
the taken request and relaunches the trial at once, on a lease of its new size (unless the
worker drains: then it is requeued, as a stopped trial is): the same trial (its record stays
RUNNING, its scheduler is not told), the same MLflow run, a new attempt, from the checkpoint
of that report. A shrink's freed devices are free before the controller's
next launches, in the same tick: a waiting trial takes them then. A launch that ends any other
way drops its pending resize and the devices reserved for it.

The relaunch's devices are chosen at the decision (a growth: the trial's own and those
reserved; a shrink: its first ones), and the launcher is asked to start the processes of the
new size there at once (``Launcher.start_ahead``: the warm launcher starts a warm group on CPU
slots). A growth whose processes were started is carried to the trial only once they are
ready (``Launcher.ready_ahead``, checked each tick; ``AHEAD_WAIT_S`` at most): the trial
trains at its old size during their start-up instead of waiting for it; a shrink is carried
at once (a waiting trial takes its devices at its next report). The relaunch runs in the
processes started ahead, or in fresh ones where none were started (the launcher cannot).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from hyperfleet.errors import PoolError
from hyperfleet.platform.clock import Clock
from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.config.elastic import elastic_sizes
from hyperfleet.platform.controller.launch import Running
from hyperfleet.platform.controller.outcomes import finite
from hyperfleet.platform.controller.prepare import PreparedTrial
from hyperfleet.platform.controller.session import SweepSession
from hyperfleet.platform.elastic import requests
from hyperfleet.platform.elastic.resize import ElasticKnobs, ElasticTrial, Resize, decide
from hyperfleet.platform.launcher.base import Launcher
from hyperfleet.platform.pool import Device, Lease, LocalPool
from hyperfleet.platform.storage import TrialRecord
from hyperfleet.spec.states import TrialState
from hyperfleet.spec.trial import TrialConfig
from hyperfleet.spec.wire import SPEC_FILE, TrialSpec, trial_dir

logger = logging.getLogger(__name__)
T = TypeVar("T")

AHEAD_WAIT_S = 60.0
"""How long a growth waits at most for the processes started ahead for it before it is carried
to the trial (a growth whose processes are ready, or were not started, is carried at once):
several times a group's start on CPU slots (4-9 s on an idle machine, up to four times that
on a loaded one)."""

WORK_EVERY_S = 1.0
"""How long a sweep's answer to "has its scheduler a trial to launch" is kept (two reads),
unless one of its trials is launched or ends meanwhile."""


@dataclass
class Pending:
    """A resize decided and not made yet: the trial runs at ``after`` devices from its next
    report with a checkpoint on."""

    after: int
    pool: LocalPool  # where the reserved devices go back to
    extra: list[Lease] = field(default_factory=list)  # devices reserved for a growth
    decided_at: float = 0.0  # clock.monotonic() of the first decision
    devices: tuple[Device, ...] = ()  # where it relaunches (its processes may start ahead)
    ahead: bool = False  # the launcher started them at the decision
    requested: bool = True  # carried to the trial (a growth waits for its processes)


class SweepDriver(Protocol):
    """What resizing uses of a sweep's driver (:class:`.driver.SweepDriver`)."""

    session: SweepSession
    launcher: Launcher
    clock: Clock
    running: dict[int, Running]
    resizes: dict[int, Pending]
    launched: int
    finished: int

    def stopping(self) -> bool: ...

    @property
    def cfg(self) -> SweepConfig: ...
    @property
    def name(self) -> str: ...
    def wants_devices(self) -> bool: ...
    def devices_per_node(self) -> int: ...
    def _db(self, fn: Callable[[], T]) -> T: ...
    def _start(self, p: PreparedTrial, lease: Lease, pool: LocalPool) -> Running: ...
    def _end(
        self, r: Running, state: TrialState | None, values: list[float] | None, error: str
    ) -> None: ...
    def _release(self, r: Running) -> None: ...
    def _abandon(self, number: int, lease: Lease, pool: LocalPool) -> None: ...


@dataclass
class _Seen:
    attempt: int
    step: int | None
    reports: int = 0


def elastic(d: SweepDriver) -> bool:
    """The sweep's trials are resized: a range of devices (validation took it only for a
    workload or a program that resumes at another size; a script trial's runner ends its
    program as paused at the resize's report, :mod:`hyperfleet.platform.launcher.script.runner`)."""
    return d.cfg.trial.resources.elastic


def resized_trial(trial: TrialConfig, devices: int) -> TrialConfig:
    """The trial's config at ``devices`` devices: its data axis is its size."""
    return trial.model_copy(
        update={
            "resources": trial.resources.model_copy(update={"devices": devices}),
            "parallel": trial.parallel.model_copy(update={"data": devices}),
        }
    )


class Resizer:
    """The policy applied to one worker's elastic trials, tick by tick (module docstring)."""

    def __init__(self, knobs: ElasticKnobs | None = None) -> None:
        self.knobs = knobs or ElasticKnobs()
        self._seen: dict[tuple[str, int], _Seen] = {}
        self._sizes: dict[tuple[str, int], tuple[int, ...]] = {}
        self._work: dict[str, tuple[float, int, bool]] = {}  # sweep -> when, launches, has

    def tick(self, drivers: Sequence[SweepDriver], pool: LocalPool, now: float) -> list[Resize]:
        """Decide over ``drivers`` (in the order the controller serves them, after its launches)
        and request the resizes decided; those it requested. None while the worker drains."""
        for d in drivers:  # a launch that ended without passing through _end (taken over)
            for number in [n for n in d.resizes if n not in d.running]:
                drop(d, number)
        if any(d.stopping() for d in drivers):
            return []
        for d in drivers:
            for number, pending in d.resizes.items():
                if not pending.requested:
                    carry(d, d.running[number], pending, now)
        running = [
            (d, r)
            for d in drivers
            if elastic(d)
            for r in sorted(d.running.values(), key=lambda r: r.number)
        ]
        live = {(d.name, r.number) for d, r in running}
        self._seen = {k: v for k, v in self._seen.items() if k in live}
        self._sizes = {k: v for k, v in self._sizes.items() if k in live}
        if not running or not self.knobs.enabled:
            return []
        ranked = len(running) > 1  # ranks matter between trials only
        trials = [self._view(i, d, r, ranked) for i, (d, r) in enumerate(running)]
        waiting = [need for d in drivers if (need := self._waiting(d, pool, now))]
        made = []
        for resize in decide(pool.free, waiting, trials, self.knobs):
            d, r = running[resize.trial]
            if request(d, r, resize.after, pool, now):
                made.append(resize)
        return made

    def _view(self, i: int, d: SweepDriver, r: Running, ranked: bool) -> ElasticTrial:
        rec = d._db(lambda: d.session.storage.trials.get(d.name, r.number))
        step = rec.last_step if rec is not None else None
        seen = self._seen.get((d.name, r.number))
        if seen is None or seen.attempt != r.attempt:  # its reports count from its launch
            seen = self._seen[(d.name, r.number)] = _Seen(r.attempt, r.from_step)
        if step != seen.step:
            seen.step, seen.reports = step, seen.reports + 1
        pending = d.resizes.get(r.number)
        held = len(r.lease.devices)
        res = d.cfg.trial.resources
        return ElasticTrial(
            trial=i, size=pending.after if pending else held, low=res.devices,
            high=res.max_devices or res.devices,
            rung=_rung(d, r.number) if ranked else 0, score=_score(d, rec),
            reports_since_resize=seen.reports, pending=pending is not None,
            growing=pending is not None and pending.after > held,
            sizes=self._allowed(d, r.number, rec),
        )  # fmt: skip

    def _allowed(self, d: SweepDriver, number: int, rec: TrialRecord | None) -> tuple[int, ...]:
        key = (d.name, number)
        if key not in self._sizes:
            self._sizes[key] = _allowed_sizes(d.cfg.trial, rec.params if rec else {})
        return self._sizes[key]

    def _waiting(self, d: SweepDriver, pool: LocalPool, now: float) -> int:
        """The devices the next trial of ``d`` waits for (0: none waits): after the tick's
        launches, one that does not fit in the free devices while its scheduler has work."""
        if d.devices_per_node() <= pool.free or not d.wants_devices():
            return 0
        looked, launched, has = self._work.get(d.name, (-WORK_EVERY_S, -1, False))
        if now - looked >= WORK_EVERY_S or launched != d.launched + d.finished:
            has = d._db(lambda: _has_work(d))
            self._work[d.name] = (now, d.launched + d.finished, has)
        return d.devices_per_node() if has else 0


def _has_work(d: SweepDriver) -> bool:
    """The sweep's scheduler would hand this worker a trial now (below max_concurrent, its
    budget not used up or a trial waiting)."""
    s = d.session
    if s.storage.trials.running_elsewhere(s.name, None) >= s.cfg.budget.max_concurrent:
        return False
    return not s.scheduler.exhausted()


def _allowed_sizes(trial: TrialConfig, params: Mapping[str, Any]) -> tuple[int, ...]:
    from hyperfleet.spec.workloads import BUILTIN, load_workload, workload_supports

    if trial.command is not None:
        return tuple(trial.resources.sizes)
    try:
        fn = None if trial.workload in BUILTIN else load_workload(trial.entry, trial.code)
        return elastic_sizes(trial, workload_supports(trial.workload, fn), params)
    except Exception:  # noqa: BLE001 - checked when the sweep was stored; the whole range
        return tuple(trial.resources.sizes)


def _score(d: SweepDriver, rec: TrialRecord | None) -> float | None:
    """The trial's latest objective value, signed so that higher is better."""
    objectives = d.cfg.all_objectives
    if rec is None or not objectives:
        return None
    objective = objectives[0]
    value = finite(rec.metrics.get(objective.metric))
    if value is None:
        return None
    return value if objective.mode == "max" else -value


def _rung(d: SweepDriver, number: int) -> int:
    """The furthest rung of successive halving the trial reached (ASHA, Hyperband)."""
    return d._db(lambda: d.session.scheduler.rung(number))


def current_params(launched: Mapping[str, Any], recorded: Mapping[str, Any]) -> dict[str, Any]:
    """The params a relaunch trains on: those of its launch, as its record has them now (a
    PBT member that exploited in its processes took the explored params there; its spec
    file still holds those it was launched with)."""
    return {name: recorded.get(name, value) for name, value in launched.items()}


def request(d: SweepDriver, r: Running, after: int, pool: LocalPool, now: float) -> bool:
    """Ask launch ``r`` of ``d`` to resize to ``after`` devices at its next report; a growth
    reserves its extra devices now. False when they are not free."""
    pending = d.resizes.get(r.number)
    if (
        pending is not None
        and pending.requested
        and requests.taken(trial_dir(d.session.workdir, d.name, r.number), r.attempt) is not None
    ):
        return False  # the trial took the request and is ending for it: nothing to change
    extra = list(pending.extra) if pending else []
    held = len(r.lease.devices) + sum(len(lease.devices) for lease in extra)
    if after > held:
        lease = pool.try_acquire(after - held)
        if lease is None:
            return False
        extra.append(lease)
    devices = tuple(sorted([*r.lease.devices, *(x for lease in extra for x in lease.devices)]))
    devices = devices[:after]  # a shrink keeps its first devices
    ahead = d.launcher.start_ahead(Lease(devices, 0), resized_trial(d.cfg.trial, after))
    decided_at = pending.decided_at if pending else now
    # a growth is carried to the trial once its processes are ready: it trains at its size
    # meanwhile; a shrink at once (its devices go to a waiting trial at its next report)
    growth = after > len(r.lease.devices) and ahead and (pending is None or not pending.requested)
    d.resizes[r.number] = new = Pending(after, pool, extra, decided_at, devices, ahead, False)
    if not growth:
        carry(d, r, new, now, at_once=True)
    logger.info(
        "sweep %s trial %d: resizes %d -> %d devices at its next report%s",
        d.name, r.number, len(r.lease.devices), after,
        " once its processes at that size are ready" if growth else "",
    )  # fmt: skip
    return True


def carry(d: SweepDriver, r: Running, p: Pending, now: float, at_once: bool = False) -> None:
    """Write the resize request for the trial's next report: ``at_once``, else once the
    processes started ahead for it are ready or it waited ``AHEAD_WAIT_S``."""
    trial = resized_trial(d.cfg.trial, p.after)
    if (
        at_once
        or now - p.decided_at >= AHEAD_WAIT_S
        or d.launcher.ready_ahead(Lease(p.devices, 0), trial)
    ):
        requests.request(trial_dir(d.session.workdir, d.name, r.number), r.attempt, p.after)
        p.requested = True
        if not at_once:
            logger.info(
                "sweep %s trial %d: its processes at %d devices %s %.1f s after the decision",
                d.name, r.number, p.after,
                "not ready" if now - p.decided_at >= AHEAD_WAIT_S else "ready",
                now - p.decided_at,
            )  # fmt: skip


def drop(d: SweepDriver, number: int) -> None:
    """The trial's pending resize, if any, is off: its reserved devices go back."""
    pending = d.resizes.pop(number, None)
    if pending is not None:
        for lease in pending.extra:
            pending.pool.release(lease)
        requests.clear(trial_dir(d.session.workdir, d.name, number))


def relaunched(d: SweepDriver, r: Running, state: TrialState | None) -> bool:
    """Launch ``r`` ended: when it ended for a resize (paused, its request taken), relaunch
    the trial at its new size and say True; else drop any pending resize (False)."""
    pending = d.resizes.get(r.number)
    if pending is None:
        return False
    tdir = trial_dir(d.session.workdir, d.name, r.number)
    after = requests.taken(tdir, r.attempt) if state is None else None
    drop(d, r.number)
    if after is None:
        return False
    if d.stopping():  # its worker drains: requeued, resumed by any worker at its min
        d._end(r, TrialState.WAITING, None, "")
        return True
    storage = d.session.storage
    rec = d._db(lambda: storage.trials.get(d.name, r.number))
    assert rec is not None
    if r.lease_row is not None:
        storage.leases.close(r.lease_row, TrialState.PAUSED)
    before = len(r.lease.devices)
    d._release(r)  # its devices, then a lease of the new size from them (and those reserved):
    # those its processes were started on ahead, else any
    started = pending.devices if len(pending.devices) == after else ()
    lease = (r.pool.try_acquire_these(started) if started else None) or r.pool.try_acquire(after)
    if lease is None:  # cannot happen: what it held and reserved was just released
        raise PoolError(f"trial {r.number}: {after} devices for its resize are not free")
    spec = TrialSpec.read(tdir / SPEC_FILE)
    spec = spec.model_copy(
        update={
            "trial": resized_trial(spec.trial, after),
            "params": current_params(spec.params, rec.params),
            "restore": None,  # its own latest checkpoint: the one of the report it ended at
            "reported_through": rec.last_step,
        }
    )
    p = PreparedTrial(r.number, spec, dict(rec.params), [], rec)
    try:
        d.running[r.number] = d._start(p, lease, r.pool)
    except Exception:  # as a launch that failed to start: back in the queue
        logger.warning("trial %d could not be relaunched at %d devices", r.number, after,
                       exc_info=True)  # fmt: skip
        d._abandon(r.number, lease, r.pool)
        return True
    waited = d.clock.monotonic() - pending.decided_at
    ahead = pending.ahead and lease.devices == pending.devices
    logger.info(
        "sweep %s trial %d resized %d -> %d devices at step %s (%.1f s after the decision; %s)",
        d.name, r.number, before, after, rec.last_step, waited,
        "its processes started ahead" if ahead else "fresh processes",
    )  # fmt: skip
    return True
