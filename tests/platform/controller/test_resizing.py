"""The controller's resizes of elastic trials on simulated trials (virtual clock, real storage
and schedulers, the real recorder): a decision carried to the trial's next report, the trial
relaunched at its new size as the same trial, devices reserved for a growth and handed to a
waiting trial at a shrink. ``tests/integration/test_elastic_resize.py`` does it with real
trial processes."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from hyperfleet.platform.clock import VirtualClock
from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.controller import SweepSession, open_session
from hyperfleet.platform.controller.resizing import Resizer
from hyperfleet.platform.elastic.resize import ElasticKnobs
from hyperfleet.platform.launcher.simulated import SimTrial, curve
from hyperfleet.platform.pool import Lease, LocalPool
from hyperfleet.platform.storage import LeaseRecord, Storage
from hyperfleet.platform.tracking import NullTracker
from hyperfleet.spec.trial import TrialConfig
from hyperfleet.testing.controller import BASE, Sim
from hyperfleet.testing.sweeps import deep_update

STEPS = 30
ELASTIC = {
    "objective": {"metric": "loss", "mode": "min"},
    "budget": {"trials": 1, "max_concurrent": 1},
    "trial": {
        "workload": "digits",  # declares it resumes at any size; the script stands for it
        "params": {"batch_size": 64},  # sizes 1, 2 and 4 of the range
        "steps": STEPS,
        "resources": {"devices": {"min": 1, "max": 4}},
    },
}


def _script() -> Any:
    return curve(lambda params, step: 1.0 / step, steps=STEPS)


def _data(tmp_path: Path, name: str = "sim", **changes: Any) -> dict[str, Any]:
    """:data:`ELASTIC` over ``Sim``'s sweep, searching the digits workload's ``lr``."""
    data = deep_update(deep_update(BASE, ELASTIC), changes)
    data.update(name=name, space={"lr": {"type": "float", "low": 1e-3, "high": 1e-1}})
    data.update(storage=f"sqlite:///{tmp_path / 'hf.db'}", workdir=str(tmp_path / "runs"))
    return data


def _sim(tmp_path: Path) -> Sim:
    sim = Sim(tmp_path, _script(), devices=4)
    sim.cfg = parse_sweep(_data(tmp_path))
    return sim


def _leases(storage: Storage, sweep: str) -> list[LeaseRecord]:
    return sorted(storage.leases.all(sweep), key=lambda lease: lease.id)


class Arrives:
    """The sweep source of a controller that serves ``first`` from the start and ``later`` from
    virtual second ``at`` on (another sweep submitted while the first runs)."""

    catalog = None

    def __init__(self, first: SweepSession, later: SweepSession, clock: VirtualClock, at: float):
        self.pending = [first]
        self.later, self.clock, self.at = later, clock, at
        self.handed_at: float | None = None

    def sessions(self, serving: set[str]) -> list[SweepSession]:
        out, self.pending = self.pending, []
        if self.handed_at is None and self.clock.monotonic() >= self.at:
            out.append(self.later)
            self.handed_at = self.clock.time()
        return out


def test_an_elastic_trial_alone_grows_to_its_max_at_its_next_report(tmp_path: Path) -> None:
    sim = _sim(tmp_path)
    summary = sim.run(sim.controller())
    assert summary.state_counts["COMPLETE"] == 1
    (trial,) = sim.trials()
    # three reports at 1 (min_interval), the decision, the resize at the 4th report
    assert trial.sizes == [[1, 1], [5, 4]]
    assert trial.attempts == 2 and trial.last_step == STEPS
    assert [len(lease.devices) for lease in _leases(sim.storage, "sim")] == [1, 4]
    assert sim.launcher.launches == {0: 2}  # one trial, launched twice
    assert sim.optuna_states() == {"COMPLETE": 1}  # its scheduler saw one trial, run once
    assert sim.max_leased == 4


def test_a_growth_waits_for_its_processes_started_ahead(tmp_path: Path) -> None:
    sim = _sim(tmp_path)
    started: list[float] = []  # when the controller asked for processes at the new size

    def start_ahead(lease: Lease, trial: TrialConfig) -> bool:
        started.append(sim.clock.monotonic())
        return True

    def ready_ahead(lease: Lease, trial: TrialConfig) -> bool:  # 3.5 virtual s to start
        return sim.clock.monotonic() >= started[0] + 3.5

    sim.launcher.start_ahead = start_ahead  # type: ignore[method-assign]
    sim.launcher.ready_ahead = ready_ahead  # type: ignore[method-assign]
    sim.run(sim.controller())
    (trial,) = sim.trials()
    # decided after 3 reports (as without processes started ahead: at 5), carried to the
    # trial once they were ready: it trained at 1 meanwhile, and grew at its next report
    assert len(started) == 1
    assert trial.sizes == [[1, 1], [9, 4]]
    assert trial.attempts == 2 and trial.last_step == STEPS


def test_no_resize_when_the_policy_is_off(tmp_path: Path) -> None:
    sim = _sim(tmp_path)
    controller = sim.controller()
    controller.resizer = Resizer(ElasticKnobs(enabled=False))
    sim.run(controller)
    (trial,) = sim.trials()
    assert trial.sizes == [[1, 1]] and trial.attempts == 1


def test_the_sweep_files_elastic_section_sets_the_workers_policy(tmp_path: Path) -> None:
    sim = _sim(tmp_path)
    sim.cfg = parse_sweep(_data(tmp_path, elastic={"min_interval": 6, "share": 1}))
    controller = sim.controller()  # as sweep run builds it: the file's knobs
    assert controller.resizer.knobs == ElasticKnobs(min_interval=6, share=1.0)
    sim.run(controller)
    (trial,) = sim.trials()
    assert trial.sizes == [[1, 1], [8, 4]]  # six reports at 1, then the resize at the 7th
    off = _sim(tmp_path / "off")
    off.cfg = parse_sweep(_data(tmp_path / "off", elastic={"enabled": False}))
    off.run(off.controller())
    (trial,) = off.trials()
    assert trial.sizes == [[1, 1]] and trial.attempts == 1


def test_a_waiting_trial_gets_devices_back_at_the_elastic_trials_next_report(
    tmp_path: Path,
) -> None:
    sim = _sim(tmp_path)
    ahead: list[tuple[list[str], int]] = []  # what the controller asked to start ahead

    def start_ahead(lease: Lease, trial: TrialConfig) -> bool:
        ahead.append(([str(d) for d in lease.devices], trial.parallel.data))
        return True

    sim.launcher.start_ahead = start_ahead  # type: ignore[method-assign]
    fixed = _data(tmp_path, "waiting", trial={"resources": {"devices": 1}})
    storage = Storage(fixed["storage"], clock=sim.clock)
    later = open_session(parse_sweep(fixed), storage, NullTracker(), None)
    controller = sim.controller()
    first = controller.sweeps.sessions(set())[0]
    source = Arrives(first, later, sim.clock, at=12.0)
    controller.sweeps = source
    controller.run()

    (grown,) = sim.trials()
    waiting = sim.storage.trials.of("waiting")
    assert [t.state for t in [grown, *waiting]] == ["COMPLETE", "COMPLETE"]
    # grew to 4 at its 4th report, gave 2 back at its first report after the waiting
    # trial's sweep was seen (it had reported min_interval times at 4 by then)
    assert [ranks for _, ranks in grown.sizes or []] == [1, 4, 2]
    leases = _leases(sim.storage, "sim")
    assert [len(lease.devices) for lease in leases] == [1, 4, 2]
    (theirs,) = _leases(sim.storage, "waiting")
    assert source.handed_at is not None
    # its sweep is first asked at the controller's next tick (the next report on the virtual
    # clock, 1 s later), where its trial finds no device; it starts at the elastic trial's
    # report after that, one report interval later, in the tick the elastic trial shrank
    assert theirs.started_at - source.handed_at == 2.0
    assert theirs.started_at == leases[2].started_at
    assert not set(theirs.devices) & set(leases[2].devices)
    # each relaunch on the devices its processes were asked to start on at the decision: a
    # growth on its own and those reserved, a shrink on its first ones
    assert ahead == [(leases[1].devices, 4), (leases[2].devices, 2)]
    assert leases[2].devices == leases[1].devices[:2]


def test_a_resize_waits_for_a_report_whose_checkpoint_is_kept(tmp_path: Path) -> None:
    sim = Sim(tmp_path, _script(), devices=4)
    sim.cfg = parse_sweep(_data(tmp_path, trial={"checkpoint": {"every": 3}}))
    sim.run(sim.controller())
    (trial,) = sim.trials()
    # decided after 3 reports; steps 4 and 5 keep no checkpoint: it stops at 6
    assert trial.sizes == [[1, 1], [7, 4]]


def test_a_request_is_for_one_launch_and_taken_once(tmp_path: Path) -> None:
    from hyperfleet.platform.elastic import requests

    requests.request(tmp_path, 1, 4)
    assert requests.pending(tmp_path, 2) is None  # a later launch's recorder ignores it
    assert requests.pending(tmp_path, 1) == 4 and requests.taken(tmp_path, 1) is None
    requests.take(tmp_path)
    assert requests.pending(tmp_path, 1) is None and requests.taken(tmp_path, 1) == 4
    requests.clear(tmp_path)
    assert requests.taken(tmp_path, 1) is None and not list(tmp_path.iterdir())


def test_pbt_members_grow_best_first_and_a_resize_keeps_an_exploits_params(
    tmp_path: Path,
) -> None:
    """Two PBT members on four devices: after three reports each grows to 2. The worse one
    exploited at step 2, in its processes: its relaunch at 2 devices trains on the explored
    params (its record's), not on those it was launched with."""
    loads: list[SimTrial] = []
    script = curve(lambda params, step: float(params["lr"]) / step, steps=12)

    def watched(t: SimTrial) -> Any:
        loads.append(t)
        return script(t)

    sim = Sim(tmp_path, watched, devices=4)
    sim.cfg = parse_sweep(
        _data(
            tmp_path,
            scheduler={"type": "pbt", "population": 2, "perturbation_interval": 2,
                       "quantile_fraction": 0.5, "seed": 0,
                       "initial": [{"lr": 0.01}, {"lr": 0.09}]},
            budget={"trials": None, "max_concurrent": 2},
            trial={"steps": 12},
        )
    )  # fmt: skip
    summary = sim.run(sim.controller())
    assert summary.state_counts["COMPLETE"] == 2
    members = {t.number: t for t in sim.trials()}
    assert [r for _, r in members[0].sizes or []] == [1, 2]
    assert [r for _, r in members[1].sizes or []] == [1, 2]
    exploits = [e for e in sim.storage.population.lineage(sim.cfg.name) if e.kind == "exploit"]
    assert exploits and exploits[0].member == 1  # the worse member, before the resize
    for number in (0, 1):
        mine = [t for t in loads if t.number == number]
        for before, after in itertools.pairwise(mine):
            if after.devices != before.devices:  # a resize: the params it trained on go on
                assert after.params["lr"] == before.params["lr"], (number, before, after)
    grown = [t for t in loads if t.number == 1 and t.devices == 2]
    assert grown and grown[0].params["lr"] != 0.09  # explored from the better member's


def test_a_request_the_trial_took_is_not_changed_before_its_relaunch(tmp_path: Path) -> None:
    """Between a trial's taking its request (it is ending, to relaunch at 2) and the worker's
    reaping it, another decision (say a device falling idle) leaves the resize as it was: the
    relaunch is at the size the trial ended for, on the devices started for it."""
    from types import SimpleNamespace

    from hyperfleet.platform.controller.resizing import Pending, request
    from hyperfleet.platform.elastic import requests
    from hyperfleet.spec.wire import trial_dir

    pool = LocalPool.slots(4)
    own, reserved = pool.try_acquire(1), pool.try_acquire(1)
    assert own is not None and reserved is not None
    devices = tuple(sorted([*own.devices, *reserved.devices]))
    pending = Pending(2, pool, [reserved], 0.0, devices, True, True)
    d = SimpleNamespace(resizes={0: pending}, session=SimpleNamespace(workdir=tmp_path), name="s")
    r = SimpleNamespace(number=0, attempt=1, lease=own)
    tdir = trial_dir(tmp_path, "s", 0)
    tdir.mkdir(parents=True)
    requests.request(tdir, 1, 2)
    requests.take(tdir)
    assert not request(d, r, 4, pool, 1.0)  # type: ignore[arg-type]
    assert d.resizes[0] is pending and pending.after == 2 and pending.devices == devices
    assert pool.free == 2  # nothing more reserved
