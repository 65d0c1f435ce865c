"""Simulated trials: scripted reports on a virtual clock, no processes (Syne Tune's idea).

A :class:`SimulatedLauncher` "runs" a trial by replaying a script — reports at given virtual
times, then an exit (or a crash, or a hang) — through the same rank-0 recorder a real trial
uses: every report is recorded in storage, given to the scheduler and decided, so pruning,
PBT exploits and pauses, requeues and budgets behave as in a real sweep. The controller's
rules are thereby tested in milliseconds: its waits advance a
:class:`~hyperfleet.platform.clock.VirtualClock` instead of sleeping.

A script is a function of the trial (number, params, the step it resumes from, how many times
it was launched, the devices of its lease: an elastic trial's pace follows its size) returning
a :class:`SimScript`; :func:`curve` builds the common one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hyperfleet.errors import Superseded
from hyperfleet.platform.clock import Clock
from hyperfleet.platform.launcher.base import LOG_TAIL_LINES, STOP_GRACE_S, Launcher, TrialHandle
from hyperfleet.platform.pool import Lease
from hyperfleet.spec.recorder import Recorder, RecorderFactory
from hyperfleet.spec.states import Outcome
from hyperfleet.spec.wire import Decision, DecisionKind, TrialSpec


@dataclass(frozen=True)
class SimReport:
    at: float  # virtual seconds after the trial's processes started
    step: int
    metrics: Mapping[str, float]


@dataclass(frozen=True)
class SimScript:
    """What a simulated trial does: its reports, then its processes end at ``end_at`` (None:
    right after the last report) with ``exit_code``; ``hang``: they never end by themselves;
    ``starting``: virtual seconds a warm worker takes to start before the trial's own time
    begins (report and end times count from then)."""

    reports: Sequence[SimReport]
    end_at: float | None = None
    exit_code: int = 0
    hang: bool = False
    starting: float = 0.0


@dataclass(frozen=True)
class SimTrial:
    number: int
    params: Mapping[str, Any]
    start_step: int  # resumes after this step (0: a fresh start)
    launch: int  # 1 for the trial's first launch, 2 for its first resume, ...
    devices: int = 1  # devices of its lease (an elastic trial's size at this launch)


Script = Callable[[SimTrial], SimScript]


def curve(
    value: Callable[[Mapping[str, Any], int], float],
    *,
    metric: str = "loss",
    steps: int,
    every: int = 1,
    seconds_per_step: float = 1.0,
) -> Script:
    """A trial that reports ``metric = value(params, step)`` every ``every`` steps up to
    ``steps``, taking ``seconds_per_step`` virtual seconds a step, and then exits 0."""

    def script(t: SimTrial) -> SimScript:
        first = (t.start_step // every + 1) * every
        reports = [
            SimReport((s - t.start_step) * seconds_per_step, s, {metric: value(t.params, s)})
            for s in range(first, steps + 1, every)
        ]
        return SimScript(reports)

    return script


@dataclass
class SimulatedHandle(TrialHandle):
    """A simulated trial: advances when polled, as far as the virtual clock has come."""

    launcher: SimulatedLauncher
    spec: TrialSpec
    recorder: Recorder
    started: float
    pending: list[SimReport] = field(default_factory=list)
    script: SimScript | None = None
    code: int | None = None
    log: list[str] = field(default_factory=list)
    devices: int = 1

    def _load(self, params: Mapping[str, Any], start_step: int) -> None:
        self.launcher.launches[self.spec.number] = self.launcher.launches.get(self.spec.number, 0)
        self.launcher.launches[self.spec.number] += 1
        launch = self.launcher.launches[self.spec.number]
        trial = SimTrial(self.spec.number, dict(params), start_step, launch, self.devices)
        self.script = self.launcher.script(trial)
        self.started = self.launcher.clock.monotonic()
        self.pending = sorted(self.script.reports, key=lambda r: r.at)

    def _end(self, outcome: str, code: int) -> int:
        try:
            self.recorder.finish(outcome)
        except Superseded:  # requeued since its last report: as the runtime's copy, it stops
            outcome, code = Outcome.SUPERSEDED, 0
        self.code = code
        self.log.append(f"ended {outcome} ({code})")
        return code

    @property
    def starting(self) -> bool:
        """Its processes are still starting (like an in-process worker's start-up)."""
        assert self.script is not None
        return self.launcher.clock.monotonic() - self.started < self.script.starting

    def poll(self) -> int | None:
        if self.code is not None:
            return self.code
        assert self.script is not None
        # due times as next_event_at computes them: the controller's wait to that time makes
        # them due here whatever the rounding of the clock's floats
        now, begun = self.launcher.clock.monotonic(), self.started + self.script.starting
        while self.pending and begun + self.pending[0].at <= now:
            r = self.pending.pop(0)
            try:
                d: Decision = self.recorder(r.step, dict(r.metrics))
            except Superseded:  # a newer attempt runs: this copy stops, as the runtime's does
                return self._end("superseded", 0)
            self.log.append(f"step {r.step}: {dict(r.metrics)} -> {d.kind.value}")
            if d.kind is DecisionKind.PRUNE:
                return self._end(Outcome.PRUNED, 0)
            if d.kind is DecisionKind.PAUSE:
                return self._end(Outcome.PAUSED, 0)
            if d.kind is DecisionKind.EXPLOIT:
                assert d.donor is not None and d.params is not None
                step = int(d.donor_step or 0)
                self.recorder.rewind(step, d.params, d.donor)
                self._load(d.params, step)
                return self.poll()
        if self.pending or self.script.hang:
            return None
        last = max((r.at for r in self.script.reports), default=0.0)
        end = last if self.script.end_at is None else self.script.end_at
        if now < begun + end:
            return None
        code = self.script.exit_code
        return self._end(Outcome.COMPLETE if code == 0 else Outcome.FAIL, code)

    def next_event_at(self) -> float:
        """When (``clock.monotonic()``) its next report or its end is due; ``math.inf``: never
        (ended, or hung)."""
        if self.code is not None:
            return math.inf
        assert self.script is not None
        begun = self.started + self.script.starting
        if self.pending:
            return begun + self.pending[0].at
        if self.script.hang:
            return math.inf
        last = max((r.at for r in self.script.reports), default=0.0)
        return begun + (last if self.script.end_at is None else self.script.end_at)

    def stop(self, grace: float = STOP_GRACE_S) -> int:
        if self.poll() is None:
            return self._end(Outcome.FAIL, 143)  # SIGTERM: the runtime unwinds, outcome fail
        return int(self.code or 0)

    def kill(self) -> int:
        if self.poll() is None:
            self.code = 137  # SIGKILL: nothing more is recorded
            self.log.append("killed")
        return int(self.code or 0)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return "\n".join(self.log[-lines:])


class SimulatedLauncher(Launcher):
    """Launches simulated trials that follow ``script`` on ``clock`` (see the module doc):
    a :class:`~hyperfleet.platform.clock.VirtualClock`, or the system's clock to run the
    scripts in wall time beside real worker loops (the scale harness).

    ``recorder_factory(spec)`` builds rank 0's recorder; by default the platform's
    :class:`~hyperfleet.platform.recorder.RankZeroRecorder` on the virtual clock.
    """

    def __init__(
        self,
        clock: Clock,
        script: Script,
        recorder_factory: RecorderFactory | None = None,
    ) -> None:
        self.clock = clock
        self.script = script
        self.recorder_factory = recorder_factory or self._recorder
        self.launches: dict[int, int] = {}
        self.handles: list[SimulatedHandle] = []
        self._live: list[SimulatedHandle] = []  # not ended when last looked at

    def _recorder(self, spec: TrialSpec) -> Recorder:
        from hyperfleet.platform.recorder import RankZeroRecorder

        return RankZeroRecorder(spec, clock=self.clock)

    def launch(self, spec: TrialSpec, lease: Lease, rendezvous: object = None) -> SimulatedHandle:
        handle = SimulatedHandle(self, spec, self.recorder_factory(spec), self.clock.monotonic())
        handle.devices = max(1, len(lease.devices))
        start = spec.reported_through or 0
        if spec.restore is not None and spec.restore.step is not None:
            start = spec.restore.step
        handle._load(spec.params, start)
        self.handles.append(handle)
        self._live.append(handle)
        return handle

    def next_event_in(self) -> float | None:
        """Its scripts say when each trial next reports or ends: the earliest of those, from
        now (the controller sleeps until then; on a virtual clock, its wait jumps there)."""
        self._live = [h for h in self._live if h.code is None]
        due = min((h.next_event_at() for h in self._live), default=math.inf)
        return max(0.0, due - self.clock.monotonic())

    def close(self) -> None:
        pass

    @property
    def running(self) -> int:
        """Simulated trials whose processes have not ended (for assertions)."""
        return sum(h.code is None for h in self.handles)
