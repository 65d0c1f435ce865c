"""Issue #50: a controller that stops on an error ends no sweep. Its trials are stopped and
requeued, and each sweep it served keeps its status for this or another worker to go on with:
a sweep is ``done`` only when its budget is reached or a user ends it (a worker that exited on
one sweep's problem left another shown "done at 1/4", which no worker served again)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperfleet.platform.launcher.simulated import curve
from hyperfleet.spec.states import SweepStatus, TrialState
from hyperfleet.testing.controller import Sim


def test_a_controller_that_fails_mid_sweep_leaves_the_sweep_running(tmp_path: Path) -> None:
    sim = Sim(tmp_path, curve(lambda p, s: float(p["x"]) / s, steps=10),
              {"budget": {"trials": 4, "max_concurrent": 2}})  # fmt: skip
    controller = sim.controller()
    tick = controller._tick

    def failing_tick() -> None:  # one sweep's problem met mid-run (e.g. at a rescan)
        if TrialState.COMPLETE in [t.state for t in sim.trials()]:
            raise RuntimeError("a problem of another sweep")
        tick()

    controller._tick = failing_tick  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="another sweep"):
        controller.run()
    row = sim.storage.sweeps.get(sim.cfg.name)
    assert row is not None and row.status != SweepStatus.DONE, row.status
    states = [t.state for t in sim.trials()]
    assert TrialState.RUNNING not in states, states  # requeued, not left running
    assert states.count(TrialState.COMPLETE) < 4
    summary = sim.run(sim.controller())  # another controller goes on to the budget
    assert summary.state_counts["COMPLETE"] == 4
    assert sim.storage.sweeps.get(sim.cfg.name).status == SweepStatus.DONE  # type: ignore[union-attr]
