"""The dashboard's pure parts on hand-made inputs: number formats, error summaries, curve
downsampling, the PBT family tree's layout, the device timeline's utilisation and the
in-memory study's distributions."""

from __future__ import annotations

import math

import pytest

from hyperfleet.dashboards import load, timeline, tree
from hyperfleet.dashboards.curves import Curve, downsample
from hyperfleet.dashboards.format import error_summary, number, run_link
from hyperfleet.dashboards.queries import PopulationData, PopulationSnapshot
from hyperfleet.dashboards.study import distribution
from hyperfleet.dashboards.tables import number_format, param_diff
from hyperfleet.dashboards.ticks import log_ticks, tick_label
from hyperfleet.platform.storage import LeaseRecord
from hyperfleet.platform.storage.population import (
    LineageEvent,
    Member,
    MemberState,
    replay_schedule,
)

# -- numbers and errors --------------------------------------------------------------------------


def test_small_learning_rates_stay_distinguishable() -> None:
    assert number(1.7e-4) != number(2.2e-4)
    assert (number(1.7e-4), number(2.2e-4)) == ("1.70e-04", "2.20e-04")
    assert [number(v) for v in (0.0123, 42, 3.14159, 0.0, 2.5e6, None, "relu")] == [
        "0.0123", "42", "3.14", "0", "2.50e+06", "-", "relu"
    ]  # fmt: skip
    assert number_format([1.7e-4, 2.2e-4]) == "%.2e" and number_format([0.5, 12]) == "%.3g"


def test_error_summary_is_the_exception_line() -> None:
    stored = (
        'exit code 1\nTraceback (most recent call last):\n  File "w.py", line 3, in main\n'
        "    raise RuntimeError('diverged')\nRuntimeError: diverged at step 7\n"
    )
    assert error_summary(stored) == "RuntimeError: diverged at step 7"
    assert error_summary("exit code 137") == "exit code 137"
    assert error_summary(None) == ""


def test_run_link() -> None:
    assert run_link("http://mlflow:5000", "3", "abc") == (
        "http://mlflow:5000/#/experiments/3/runs/abc?workflowType=machine_learning"
    )
    assert run_link("http://mlflow:5000", None, "abc") is None
    assert run_link("http://mlflow:5000", "3", "pending:7") is None, "no run yet: no link"


def test_param_diff_keeps_only_what_differs() -> None:
    diff = param_diff({1: {"lr": 0.1, "act": "relu", "w": 8}, 2: {"lr": 0.2, "act": "relu"}})
    assert list(diff.index) == ["lr", "w"] and list(diff.columns) == ["trial 1", "trial 2"]


# -- curves --------------------------------------------------------------------------------------


def test_downsample_keeps_ends_and_extremes() -> None:
    n = 10_000
    values = [math.sin(i / 300) for i in range(n)]
    values[4321] = 50.0  # a spike
    values[8765] = -50.0  # a dip
    curve = Curve(0, "loss", list(range(n)), values, [float(i) for i in range(n)])
    small = downsample(curve, 400)
    assert len(small) <= 400 and small.steps == sorted(small.steps)
    assert small.steps[0] == 0 and small.steps[-1] == n - 1
    assert 50.0 in small.values and -50.0 in small.values
    assert downsample(small, 400) is small


# -- the family tree -----------------------------------------------------------------------------


def _event(seq: int, kind: str, member: int, gen: int, step: int, donor: int, donor_step: int,
           new: dict[str, float]) -> LineageEvent:  # fmt: skip
    return LineageEvent("s", member, gen, kind, step, donor, donor_step, {}, new, 1.0, 0.5,
                        seq=seq)  # fmt: skip


def _population() -> PopulationData:
    """Member 1 copies 0 at 4 (from 4), then 2 copies 1 at 8 (from 12: it was behind)."""
    members = {
        n: Member(
            n,
            params={"lr": 0.1 * (n + 1)},
            initial={"lr": 0.1 * (n + 1)},
            state=MemberState.DONE,
            step=16,
        )
        for n in range(3)
    }
    events = [
        _event(1, "exploit", 1, 1, 4, 0, 4, {"lr": 0.1}),
        _event(2, "explore", 1, 1, 4, 0, 4, {"lr": 0.12}),
        _event(3, "exploit", 2, 1, 8, 1, 12, {"lr": 0.12}),
        _event(4, "explore", 2, 1, 8, 1, 12, {"lr": 0.096}),
    ]
    snapshot = PopulationSnapshot("s", members, events)
    schedules = {n: replay_schedule(snapshot, "s", n) for n in members}
    return PopulationData(members, events, schedules)


def test_tree_segments_and_edges_follow_the_lineage() -> None:
    pop = _population()
    segs = [(s.member, s.start, s.end, s.params["lr"]) for s in tree.segments(pop)]
    assert segs == [
        (0, 0, 16, 0.1),
        (1, 0, 4, 0.2), (1, 4, 16, 0.12),
        (2, 0, 8, pytest.approx(0.3)), (2, 12, 16, 0.096),
    ]  # fmt: skip
    assert [(e.donor, e.donor_step, e.member) for e in tree.edges(pop)] == [(0, 4, 1), (1, 12, 2)]


def test_ancestry_is_the_replayed_schedule() -> None:
    pop = _population()
    path = tree.ancestry(pop, 2)
    assert [(s.member, s.start, s.end) for s in path] == [(2, 12, 16), (1, 4, 12), (0, 0, 4)]
    assert [(s.start, s.params) for s in reversed(path)] == pop.schedules[2]


def test_tree_figure_draws_one_arrow_per_exploit() -> None:
    fig = tree.figure(_population(), winner=2, colour_by="lr", log=True)
    edges = next(t for t in fig.data if t.name.startswith("exploit"))
    assert [tuple(c) for c in edges.customdata[::3]] == [(0, 4, 1, 4), (1, 12, 2, 8)]
    assert any(t.name == "member 2's ancestry" for t in fig.data)


# -- the device timeline -------------------------------------------------------------------------


def _lease(i: int, trial: int, device: str, start: float, end: float | None, state: str | None
           ) -> LeaseRecord:  # fmt: skip
    return LeaseRecord(i, "s", trial, "gpu1", 7, [device], start, end, state)


def test_utilisation_idle_gaps_and_pauses() -> None:
    leases = [
        _lease(1, 0, "cuda:0", 0.0, 40.0, "PAUSED"),
        _lease(2, 1, "cuda:1", 0.0, 100.0, "COMPLETE"),
        _lease(3, 2, "cuda:0", 60.0, 100.0, "COMPLETE"),
        _lease(4, 0, "cuda:0", 100.0, None, None),  # running now
    ]
    now = 120.0
    bars = timeline.bars(leases, now)
    assert [(b.lane, b.trial, b.end, b.state) for b in bars][-1] == ("gpu1 · cuda:0", 0, 120.0,
                                                                    "RUNNING")  # fmt: skip
    start, end = timeline.window(leases, now)
    uses = {u.lane: u for u in timeline.utilisation(bars, start, end)}
    gpu0, gpu1 = uses["gpu1 · cuda:0"], uses["gpu1 · cuda:1"]
    assert gpu0.busy_s == 100.0 and gpu0.idle_gaps == 1 and gpu0.longest_idle_s == 20.0
    assert gpu1.utilisation == pytest.approx(100 / 120) and gpu1.longest_idle_s == 20.0
    pauses = timeline.pauses(leases, now, running=True)
    assert [(p.lane, p.start, p.end) for p in pauses] == [("paused · trial 0", 40.0, 100.0)]


def test_a_host_with_several_workers_has_a_lane_per_worker_and_device() -> None:
    def lease(i: int, host: str, worker: str, device: str) -> LeaseRecord:
        pid = int(worker.split("-")[1])
        return LeaseRecord(i, "s", i, host, pid, [device], i, i + 1.0, "COMPLETE", worker)

    leases = [
        lease(1, "a", "a-11-x1", "cpu:0"),
        lease(2, "a", "a-22-y2", "cpu:0"),  # a second worker of host a: its own cpu:0 slot
        lease(3, "b", "b-33-z3", "cpu:0"),  # host b has one worker: no worker in its lanes
        lease(4, "b", "b-33-z3", "cpu:0"),
    ]
    bars = timeline.bars(leases, now=10.0)
    assert [(b.lane, b.worker) for b in bars] == [
        ("a · worker 11-x1 · cpu:0", "worker 11-x1"),
        ("a · worker 22-y2 · cpu:0", "worker 22-y2"),
        ("b · cpu:0", ""),
        ("b · cpu:0", ""),
    ]
    uses = timeline.utilisation(bars, 1.0, 5.0)
    assert [(u.lane, u.host, u.worker, u.leases) for u in uses] == [
        ("a · worker 11-x1 · cpu:0", "a", "worker 11-x1", 1),
        ("a · worker 22-y2 · cpu:0", "a", "worker 22-y2", 1),
        ("b · cpu:0", "b", "", 2),
    ]


def test_a_shared_device_has_a_lane_per_share() -> None:
    def lease(i: int, share: int, start: float, end: float) -> LeaseRecord:
        return LeaseRecord(i, "s", i, "h", 7, ["cuda:0"], start, end, "COMPLETE", None, share, 2)

    leases = [lease(1, 0, 0.0, 10.0), lease(2, 1, 0.0, 6.0), lease(3, 1, 6.0, 10.0)]
    whole = LeaseRecord(4, "s", 4, "h", 7, ["cuda:1"], 0.0, 10.0, "COMPLETE")
    bars = timeline.bars([*leases, whole], now=10.0)
    assert [(b.lane, b.trial, b.share, b.of) for b in bars] == [
        ("h · cuda:0 · share 0", 1, 0, 2),
        ("h · cuda:0 · share 1", 2, 1, 2),
        ("h · cuda:0 · share 1", 3, 1, 2),
        ("h · cuda:1", 4, 0, 1),
    ]
    uses = {u.lane: u for u in timeline.utilisation(bars, 0.0, 10.0)}
    assert uses["h · cuda:0 · share 1"].leases == 2 and uses["h · cuda:0 · share 1"].busy_s == 10
    assert len(timeline.figure(bars, []).data[0].y) == 4


# -- the in-memory study -------------------------------------------------------------------------


def test_distributions_cover_every_stored_value() -> None:
    spec = {"type": "float", "low": 1e-3, "high": 1e-1, "log": True}
    dist = distribution(spec, [5e-4, 0.05])
    assert (dist.low, dist.high, dist.log) == (5e-4, 1e-1, True)
    ints = distribution({"type": "int", "low": 2, "high": 8, "step": 2}, [3])
    assert (ints.low, ints.high, ints.step) == (2, 8, 1)
    cats = distribution({"type": "categorical", "choices": ["a", "b"]}, ["c"])
    assert cats.choices == ("a", "b", "c")


# -- log-axis ticks and device load --------------------------------------------------------------


def test_log_ticks_fit_the_room_they_get() -> None:
    assert log_ticks(1e-4, 1e-1, 8) == [1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1]
    assert log_ticks(1e-4, 1e-1, 4) == [1e-4, 1e-3, 0.01, 0.1]
    assert log_ticks(16, 256, 4) == [20, 50, 100, 200]
    assert log_ticks(1e-9, 1e3, 4) == [1e-9, 1e-5, 0.1, 1e3]  # every 4th decade
    assert [tick_label(v) for v in (1e-5, 0.001, 20, 5000, 2e6)] == [
        "1e-05", "0.001", "20", "5000", "2e+06",
    ]  # fmt: skip


def test_device_load_is_the_samples_taken_while_leased() -> None:
    def samples(*points: tuple[float, float]) -> Curve:
        return Curve(0, "load", list(range(len(points))), [v for _, v in points],
                     [t for t, _ in points])  # fmt: skip

    gpu = _lease(1, 0, "cuda:0", 100.0, 200.0, "COMPLETE")
    run = {"gpu_0_utilization_percentage": samples((50.0, 10.0), (150.0, 80.0), (200.0, 60.0))}
    assert load.lease_load(gpu, run, now=300.0) == pytest.approx(0.7)  # not the sample at 50
    cpu = _lease(2, 1, "cpu:0", 0.0, 100.0, "COMPLETE")
    host = {load.CPU_KEY: samples((10.0, 20.0), (90.0, 40.0))}
    metrics = {"run-0": run, "run-1": host}
    found = load.sweep_load([gpu, cpu], {0: "run-0", 1: "run-1"}, metrics.__getitem__, 300.0)
    assert found == pytest.approx((0.7 * 100 + 0.3 * 100) / 200)
    assert load.sweep_load([gpu], {0: "run-0"}, lambda _: {}, 300.0) is None  # none recorded
