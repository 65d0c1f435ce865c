"""A fleet's looks for stale trials, and its idle workers' asks, keep about the same pace
whatever its size: a worker of a small fleet looks every ``stale_after / 3`` and asks every
``ask_every``; one of a large fleet does both its share less often, at a random phase, so the
fleet as a whole still looks every few hundred milliseconds."""

from __future__ import annotations

from pathlib import Path

from hyperfleet.platform.controller.pace import LOOKERS, paced
from hyperfleet.platform.launcher.simulated import curve
from hyperfleet.platform.storage import Storage, WorkerRecord
from hyperfleet.testing.controller import Sim


def _fleet(storage: Storage, first: int, last: int, now: float) -> None:
    for i in range(first, last):
        record = WorkerRecord(f"w{i}", "vm", i, "default", [], None, None, now, now, "active")
        storage.workers.register(record)


def test_the_fleet_not_each_worker_looks_every_few_seconds(tmp_path: Path) -> None:
    sim = Sim(tmp_path, curve(lambda p, s: float(p["x"]) / s, steps=2))
    c = sim.controller(stale_after=30)
    c.registry = sim.storage
    _fleet(sim.storage, 0, LOOKERS, sim.clock.time())
    assert c._recovery_every() == 10.0, "a fleet of LOOKERS workers or fewer: each every 10 s"
    _fleet(sim.storage, LOOKERS, 1000, sim.clock.time())  # 1,000 live workers
    paces = [c._recovery_every() for _ in range(200)]
    share = 10.0 * 1000 / LOOKERS
    assert all(0.5 * share <= p <= 1.5 * share for p in paces)
    assert max(paces) - min(paces) > 0.5 * share, "spread: workers do not look in step"
    fleet = 1000 / (sum(paces) / len(paces))  # looks a second, the fleet's
    assert 0.8 * LOOKERS / 10 < fleet < 1.25 * LOOKERS / 10
    c._rescan()
    (driver,) = c.drivers.values()
    assert driver.pace == 1000 / LOOKERS, "an idle worker asks its share less often too"
    asks = [paced(2.0, driver.pace) for _ in range(200)]
    assert all(0.5 * 2.0 * driver.pace <= a <= 1.5 * 2.0 * driver.pace for a in asks)
    sim.clock.advance(31)  # silent past stale_after: no longer live, the usual pace again
    assert c._recovery_every() == 10.0 and driver.pace == 1.0 and paced(2.0, 1.0) == 2.0
