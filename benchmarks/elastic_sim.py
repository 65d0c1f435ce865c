"""An ASHA sweep on the simulated launcher and a virtual clock, fixed-size or elastic.

The trials are the platform's simulated ones (:mod:`hyperfleet.platform.launcher.simulated`):
a script of reports on a :class:`~hyperfleet.platform.clock.VirtualClock`, launched on leases
of a :class:`~hyperfleet.platform.pool.LocalPool` of ``devices`` devices, each report given to
rank 0's recorder. The recorder here is Optuna's asynchronous successive halving
(``SuccessiveHalvingPruner`` on an in-memory study, a seeded random sampler): a report at a
rung continues or prunes the trial, as in a sweep with ``pruner: {type: asha}``.

What the loop does in place of the controller: it launches waiting trials while devices are
free and, in the elastic mode, asks the policy of :mod:`hyperfleet.platform.elastic.resize`
after every event which trials to resize. A resize is made at the trial's next report: its
simulated processes end there, its lease goes back, and it is launched again on a lease of its
new size from that step (the script resumes there), after ``launch_s`` of start-up. Devices a
growing trial was promised are held back from new launches until then.

The model of a step: ``step_s`` seconds on one device; on ``k`` devices
``step_s * (serial + (1 - serial) / k)`` (Amdahl: a share that does not split). A trial's loss
is ``x + y / sqrt(step)`` for its sampled ``x`` and ``y``, so early ranks are a noisy guide to
final ones, as ASHA assumes.

Measured: the share of the device-seconds held by trials over the sweep, and over its tail
(from when fewer trials remain unfinished than there are devices); the virtual time until the
best trial (lowest final loss) completed; the sweep's virtual wall time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import optuna

from hyperfleet.platform.clock import VirtualClock
from hyperfleet.platform.elastic.resize import ElasticKnobs, ElasticTrial, decide
from hyperfleet.platform.launcher.simulated import (
    SimReport,
    SimScript,
    SimTrial,
    SimulatedHandle,
    SimulatedLauncher,
)
from hyperfleet.platform.pool import Device, Lease, LocalPool
from hyperfleet.spec.recorder import Recorder
from hyperfleet.spec.states import Outcome
from hyperfleet.spec.trial import TrialConfig
from hyperfleet.spec.wire import Decision, DecisionKind, TrialSpec


@dataclass(frozen=True)
class Case:
    devices: int = 64
    trials: int = 500
    steps: int = 81
    min_resource: int = 1
    eta: int = 3
    step_s: float = 10.0
    serial: float = 0.05
    launch_s: float = 5.0
    low: int = 1
    high: int = 64
    min_interval: int = 3
    share: float = 0.5
    seed: int = 0


@dataclass
class Result:
    mode: str
    wall_s: float
    utilisation: float
    tail_utilisation: float
    tail_start_s: float
    best_done_s: float
    best_value: float
    resizes: int
    completed: int
    pruned: int


@dataclass
class Live:
    """A running trial: its handle and lease, and what the policy reads of it."""

    number: int
    params: dict[str, float]
    study_trial: optuna.trial.Trial
    handle: SimulatedHandle | None = None
    lease: Lease | None = None
    last_step: int = 0
    loss: float | None = None
    reports_since_resize: int = 0
    pending: int | None = None
    outcome: str | None = None
    steps: list[int] = field(default_factory=list)  # every step recorded, in order
    sizes: list[int] = field(default_factory=list)  # the size of each of its launches

    @property
    def size(self) -> int:
        assert self.lease is not None
        return len(self.lease.devices)


class AshaRecorder(Recorder):
    """Rank 0's recorder of a simulated trial: its reports to Optuna's successive halving."""

    def __init__(self, sim: ElasticSim, number: int) -> None:
        self.sim, self.live = sim, sim.live[number]

    def __call__(self, step: int, metrics: Mapping[str, float]) -> Decision:
        live, loss = self.live, float(metrics["loss"])
        live.last_step, live.loss = step, loss
        live.steps.append(step)
        live.reports_since_resize += 1
        live.study_trial.report(loss, step)
        if step < self.sim.case.steps and live.study_trial.should_prune():
            return Decision(kind=DecisionKind.PRUNE)
        return Decision.cont()

    def rewind(self, step: int, params: Mapping[str, Any], donor: int) -> None:
        raise AssertionError("ASHA does not exploit")

    def finish(self, outcome: str) -> None:
        self.live.outcome = outcome

    def pinned_steps(self) -> set[int] | None:
        return None

    def note(self, message: str, restart: bool = True) -> None:
        pass

    def check(self) -> None:
        pass


@dataclass
class ElasticSim:
    case: Case
    elastic: bool
    clock: VirtualClock = field(default_factory=VirtualClock)
    live: dict[int, Live] = field(default_factory=dict)

    def __post_init__(self) -> None:
        c = self.case
        self.pool = LocalPool([Device("cpu", i) for i in range(c.devices)])
        self.launcher = SimulatedLauncher(self.clock, self._script, self._recorder)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.study = optuna.create_study(
            sampler=optuna.samplers.RandomSampler(seed=c.seed),
            pruner=optuna.pruners.SuccessiveHalvingPruner(
                min_resource=c.min_resource, reduction_factor=c.eta
            ),
        )
        self.config = TrialConfig(workload="sim:main", steps=c.steps, eval_every=1)
        self.knobs = ElasticKnobs(min_interval=c.min_interval, share=c.share)
        self.started = self.finished = self.resizes = self.reserved = 0
        self.held_s = self.tail_held_s = 0.0
        self.tail_start: float | None = None
        self.done: list[tuple[float, float]] = []  # (final loss, when) of completed trials
        self.pruned = 0
        self.ended: list[Live] = []  # every trial that ended, in order

    # -- the simulated trials ------------------------------------------------------------

    def _step_s(self, devices: int) -> float:
        c = self.case
        return c.step_s * (c.serial + (1.0 - c.serial) / devices)

    def _script(self, t: SimTrial) -> SimScript:
        per = self._step_s(t.devices)
        x, y = float(t.params["x"]), float(t.params["y"])
        reports = [
            SimReport((s - t.start_step) * per, s, {"loss": x + y / math.sqrt(s)})
            for s in range(t.start_step + 1, self.case.steps + 1)
        ]
        return SimScript(reports, starting=self.case.launch_s)

    def _recorder(self, spec: TrialSpec) -> Recorder:
        return AshaRecorder(self, spec.number)

    def _launch(self, live: Live, size: int) -> None:
        lease = self.pool.try_acquire(size)
        assert lease is not None, f"no {size} devices for trial {live.number}"
        spec = TrialSpec(
            sweep="bench-elastic",
            number=live.number,
            trial=self.config,
            params=live.params,
            workdir="/nonexistent",
            trial_dir=f"/nonexistent/{live.number}",
            reported_through=live.last_step or None,
        )
        live.lease, live.reports_since_resize, live.pending = lease, 0, None
        live.sizes.append(size)
        live.handle = self.launcher.launch(spec, lease)

    # -- the loop ------------------------------------------------------------------------

    def _launch_waiting(self) -> None:
        while self.started < self.case.trials and self.pool.free - self.reserved >= self.case.low:
            t = self.study.ask()
            params = {"x": t.suggest_float("x", 0.0, 1.0), "y": t.suggest_float("y", 0.0, 1.0)}
            live = Live(self.started, params, t)
            self.live[live.number] = live
            self.started += 1
            self._launch(live, self.case.low)

    def _rung(self, step: int) -> int:
        c = self.case
        return sum(1 for k in range(64) if c.min_resource * c.eta**k <= step)

    def _decide(self) -> None:
        c = self.case
        releasing = sum(
            t.size - t.pending
            for t in self.live.values()
            if t.pending is not None and t.pending < t.size
        )
        views = [
            ElasticTrial(
                t.number,
                t.pending if t.pending is not None else t.size,
                c.low,
                c.high,
                rung=self._rung(t.last_step),
                score=None if t.loss is None else -t.loss,
                reports_since_resize=t.reports_since_resize,
                pending=t.pending is not None,
                growing=t.pending is not None and t.pending > t.size,
            )
            for t in self.live.values()
        ]
        waiting = [c.low] if self.started < c.trials else []
        free = self.pool.free - self.reserved + releasing
        for r in decide(free, waiting, views, self.knobs):
            self.live[r.trial].pending = r.after
            if r.grows:  # from its size, or from a pending growth's target
                self.reserved += r.after - r.before

    def _resize(self, live: Live) -> None:
        """At the report just made: end this launch, relaunch at the pending size from it."""
        assert live.handle is not None and live.lease is not None and live.pending is not None
        before, after = live.size, live.pending
        live.handle.kill()
        self.pool.release(live.lease)
        if after > before:
            self.reserved -= after - before
        self.resizes += 1
        self._launch(live, after)

    def _end(self, live: Live) -> None:
        assert live.lease is not None
        self.pool.release(live.lease)
        if live.pending is not None and live.pending > live.size:
            self.reserved -= live.pending - live.size
        del self.live[live.number]
        self.ended.append(live)
        self.finished += 1
        if live.outcome == Outcome.COMPLETE and live.loss is not None:
            self.study.tell(live.study_trial, live.loss)
            self.done.append((live.loss, self.clock.monotonic()))
        else:
            self.study.tell(live.study_trial, state=optuna.trial.TrialState.PRUNED)
            self.pruned += 1
        if self.tail_start is None and self.case.trials - self.finished < self.case.devices:
            self.tail_start = self.clock.monotonic()

    def _poll(self) -> None:
        for live in list(self.live.values()):
            assert live.handle is not None
            seen = live.reports_since_resize
            if live.handle.poll() is not None:
                self._end(live)
            elif live.pending is not None and live.reports_since_resize > seen:
                self._resize(live)

    def run(self) -> Result:
        begun = self.clock.monotonic()
        while self.started < self.case.trials or self.live:
            self._launch_waiting()
            if self.elastic:
                self._decide()
            dt = self.launcher.next_event_in()
            assert dt is not None and math.isfinite(dt), "a live trial has no next event"
            held = sum(t.size for t in self.live.values())
            self.held_s += held * dt
            if self.tail_start is not None:
                self.tail_held_s += held * dt
            self.clock.advance(dt)
            self._poll()
        return self._result(self.clock.monotonic() - begun, begun)

    def _result(self, wall: float, begun: float) -> Result:
        n = self.case.devices
        tail_start = self.tail_start if self.tail_start is not None else begun + wall
        tail_s = begun + wall - tail_start
        best_value, best_at = min(self.done) if self.done else (math.nan, math.nan)
        return Result(
            mode="elastic" if self.elastic else "fixed",
            wall_s=wall,
            utilisation=self.held_s / (n * wall) if wall else 0.0,
            tail_utilisation=self.tail_held_s / (n * tail_s) if tail_s else 0.0,
            tail_start_s=tail_start - begun,
            best_done_s=best_at - begun,
            best_value=best_value,
            resizes=self.resizes,
            completed=len(self.done),
            pruned=self.pruned,
        )


def run_case(case: Case, elastic: bool) -> Result:
    return ElasticSim(case, elastic).run()
