"""A new scheduler touches 2 places: its module (configuration class, scheduler, builder: here,
this test module) and its row of the table (``register_scheduler``, the run-time form of a row
of ``config/registry.py``). With only those, the sweep file accepts its ``type:`` and a sweep
runs with it end to end through the controller; without the row, the file is refused."""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config import SweepConfig, parse_sweep
from hyperfleet.platform.config.model import register_scheduler, unregister_scheduler
from hyperfleet.platform.launcher.simulated import curve
from hyperfleet.platform.schedulers import Decision, Scheduler, Suggestion, build_scheduler
from hyperfleet.platform.schedulers.base import TrialEnd
from hyperfleet.platform.storage import Storage
from hyperfleet.spec.states import TrialState
from hyperfleet.testing.controller import Sim
from hyperfleet.testing.sweeps import minimal_sweep

# -- place 1: the scheduler's module --------------------------------------------------------


class StrideConfig(BaseModel):
    """A uniform search whose trial ``n`` draws its params from a generator seeded by
    ``(seed, n)``: each suggestion is known from its number alone."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: Literal["stride"]
    seed: int = 0


class StrideScheduler(Scheduler):
    """Its state is the sweep's trials in storage: the next number is how many there are, a
    requeued trial (WAITING) is suggested again with its own params."""

    def __init__(
        self, config: StrideConfig, storage: Storage, sweep: str, bounds: Mapping[str, Any],
        trials: int,
    ) -> None:  # fmt: skip
        self.config, self.storage, self.sweep = config, storage, sweep
        self.bounds, self.trials = dict(bounds), trials

    def params(self, number: int) -> dict[str, float]:
        draw = random.Random(f"{self.config.seed}/{number}")
        return {name: draw.uniform(low, high) for name, (low, high) in self.bounds.items()}

    def suggest(self) -> Suggestion | None:
        records = self.storage.trials.of(self.sweep)
        waiting = [t.number for t in records if t.state == TrialState.WAITING]
        if waiting:
            return Suggestion(waiting[0], self.params(waiting[0]))
        if len(records) >= self.trials:
            return None
        return Suggestion(len(records), self.params(len(records)))

    def report(self, trial_number: int, step: int, metrics: Mapping[str, float]) -> None:
        pass  # the recorder stores the report; a uniform search learns nothing from it

    def decide(self, trial_number: int, step: int) -> Decision:
        return Decision()

    def _end(self, trial_number: int, end: TrialEnd) -> None:
        pass

    def requeue(self, trial_number: int) -> None:
        pass  # the controller marks it WAITING in storage, where suggest finds it

    def running(self) -> set[int]:
        return {t.number for t in self.storage.trials.of(self.sweep, TrialState.RUNNING)}

    def budget_left(self) -> int | None:
        return max(0, self.trials - len(self.storage.trials.of(self.sweep)))

    def learns_from_results(self) -> bool:
        return False


def build_stride(sweep: SweepConfig, storage: Storage, create: bool) -> Scheduler:
    assert isinstance(sweep.scheduler, StrideConfig) and sweep.budget.trials is not None
    bounds = {name: (spec.low, spec.high) for name, spec in sweep.space.items()}  # type: ignore[union-attr]
    return StrideScheduler(sweep.scheduler, storage, sweep.name, bounds, sweep.budget.trials)


# -- place 2: its row of the table -----------------------------------------------------------


@pytest.fixture
def stride() -> Iterator[None]:
    register_scheduler(StrideConfig, build_stride)
    yield
    unregister_scheduler(StrideConfig)


def test_a_sweep_runs_with_a_scheduler_registered_in_two_places(
    stride: None, tmp_path: Path
) -> None:
    script = curve(lambda params, step: (float(params["x"]) - 0.3) ** 2, steps=5)
    changes = {"scheduler": {"type": "stride", "seed": 7}, "budget": {"trials": 5}}
    sim = Sim(tmp_path, script, changes)
    assert isinstance(sim.cfg.scheduler, StrideConfig) and sim.cfg.scheduler.seed == 7
    summary = sim.run(sim.controller())
    assert summary.state_counts["COMPLETE"] == 5
    built = build_scheduler(sim.cfg, sim.storage)
    assert isinstance(built, StrideScheduler)
    ran = {t.number: dict(t.params) for t in sim.trials()}
    assert ran == {n: built.params(n) for n in range(5)}, "each trial ran the params suggested"
    assert built.suggest() is None and built.budget_left() == 0


def test_without_its_row_the_sweep_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"scheduler\.type.*'stride'"):
        parse_sweep(minimal_sweep(scheduler={"type": "stride"}))
