"""A controller over simulated trials: real storage (SQLite), real schedulers, a virtual clock,
no processes. ``Sim`` builds one sweep's parts; ``Sim.controller()`` can be called again to
"restart" the controller on the same storage, as a rerun of ``sweep run`` would.

What a simulated trial does (its reports, how and when its processes end) is a ``Script`` of
:mod:`hyperfleet.platform.launcher.simulated` (``curve`` builds the common one). A test of a
controller rule, in milliseconds::

    script = curve(lambda params, step: float(params["x"]) / step, steps=10)
    sim = Sim(tmp_path, script, {"budget": {"trials": 4, "max_concurrent": 2}})
    summary = sim.run(sim.controller())
    assert summary.state_counts["COMPLETE"] == 4 and sim.max_running == 2

``Sim``'s sweep is :data:`BASE` with the test's ``changes`` merged in (:func:`deep_update`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hyperfleet.platform.clock import VirtualClock
from hyperfleet.platform.config import SweepConfig, parse_sweep
from hyperfleet.platform.controller import (
    Controller,
    FixedSweeps,
    Progress,
    Timing,
    Until,
    open_session,
)
from hyperfleet.platform.elastic.resize import ElasticKnobs
from hyperfleet.platform.launcher.simulated import Script, SimulatedLauncher
from hyperfleet.platform.pool import Device, LocalPool
from hyperfleet.platform.storage import Storage, TrialRecord
from hyperfleet.platform.storage.results import SweepSummary
from hyperfleet.testing.sweeps import deep_update, minimal_sweep

__all__ = ["BASE", "Sim"]

#: the sweep of a ``Sim``: six trials of ten steps, two at a time, one device each
BASE = minimal_sweep(
    name="sim", budget={"trials": 6}, trial={"steps": 10, "resources": {"devices": 1}}
)


@dataclass
class Sim:
    root: Path
    script: Script
    changes: Mapping[str, Any] = field(default_factory=dict)
    devices: int = 2
    clock: VirtualClock = field(default_factory=VirtualClock)
    max_running: int = 0  # the most trials seen running at once, over every controller
    max_leased: int = 0

    def __post_init__(self) -> None:
        data = deep_update(BASE, dict(self.changes))
        data["storage"] = f"sqlite:///{self.root / 'hf.db'}"
        data["workdir"] = str(self.root / "runs")
        self.cfg: SweepConfig = parse_sweep(data)
        self.pool = self._pool()
        self.launcher = SimulatedLauncher(self.clock, self.script)
        self.storage = Storage(str(self.cfg.storage), clock=self.clock)

    def _pool(self) -> LocalPool:
        return LocalPool([Device("cpu", i) for i in range(self.devices)])

    def controller(self, until: Until | None = None, **timing: float) -> Controller:
        """A controller as a new ``sweep run`` process would build it (its own device pool);
        ``until``: when it ends by itself (default: when its sweep is done)."""
        from hyperfleet.platform.tracking import NullTracker

        self.pool = self._pool()
        storage = Storage(str(self.cfg.storage), clock=self.clock)
        session = open_session(self.cfg, storage, NullTracker(), None)
        controller = Controller(
            self.pool,
            FixedSweeps([session]),
            lambda _: self.launcher,
            clock=self.clock,
            timing=Timing(**timing),
            until=until or Until(done=True),
            elastic=ElasticKnobs.of(self.cfg.elastic),  # the sweep file's, as sweep run takes them
        )
        controller.on_progress = lambda p: self._watch(controller, p)
        return controller

    def run(self, controller: Controller) -> SweepSummary:
        """Run ``controller`` to its end; the sweep's summary."""
        return controller.run()[self.cfg.name]

    def _watch(self, controller: Controller, _: Progress) -> None:
        self.max_running = max(self.max_running, self.launcher.running)
        leased = self.pool.size - self.pool.free
        if self.cfg.trial.resources.devices == 0:
            leased = controller.running
        self.max_leased = max(self.max_leased, leased)
        assert self.launcher.running == controller.running

    def trials(self) -> list[TrialRecord]:
        return self.storage.trials.of(self.cfg.name)

    def states(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.trials():
            out[t.state] = out.get(t.state, 0) + 1
        return out

    def optuna_states(self) -> dict[str, int]:
        import optuna

        study = optuna.load_study(study_name=self.cfg.name, storage=self.storage.optuna)
        out: dict[str, int] = {}
        for t in study.get_trials(deepcopy=False):
            out[t.state.name] = out.get(t.state.name, 0) + 1
        return out
