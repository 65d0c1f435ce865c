"""A storage with a resized trial, written as a worker writes it (no sweep is run, so it takes
a second): the sweep ``elastic`` (``devices: {min: 1, max: 4}``), whose trial 0 is launched at
one device and relaunched at 2, 4 and 2 (:data:`PATH`), each launch a lease of its own closed
PAUSED at the resize, its size recorded at its first report; its trial 1 keeps one device and
ends first. And the sweep ``fixed`` (``devices: 1``), one trial on one device. The times come
from a virtual clock, so a test can say where each launch starts."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hyperfleet.platform.clock import VirtualClock
from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.storage import Storage
from hyperfleet.spec.states import SweepStatus, TrialState
from hyperfleet.testing.sweeps import digits_sweep

ELASTIC = "elastic"
FIXED = "fixed"
WORKER = "host-1-w1"
START = 1_800_000_000.0
END_STEP = 130
PATH = [  # trial 0's launches: the first step each reports, its devices
    (1, ["cpu:0"]),
    (40, ["cpu:0", "cpu:1"]),
    (70, ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]),
    (100, ["cpu:0", "cpu:1"]),
]
STEADY = [(1, ["cpu:2"])]  # trial 1, on one device to step 60
EVERY = 10  # a report every 10 steps, 3 s apart on the clock
LAUNCH_S = 2.0  # from a launch to its first report


def _trial(url: str, sweep: str, number: int, path: Sequence[tuple[int, list[str]]], end: int,
           accuracy: float) -> None:  # fmt: skip
    clock = VirtualClock(START)
    st = Storage(url, clock=clock)
    st.trials.upsert(sweep, number, state=TrialState.RUNNING, params={"lr": 0.01},
                     worker=WORKER, started_at=clock.time())  # fmt: skip
    for i, (first, devices) in enumerate(path):
        last = path[i + 1][0] if i + 1 < len(path) else end + 1
        attempt, lease = st.trials.launch_attempt(
            sweep, number, devices, worker=WORKER, state=TrialState.RUNNING
        )
        clock.advance(LAUNCH_S)
        st.trials.record_size(sweep, number, first, len(devices), attempt=attempt)
        for step in range(first, last, EVERY):
            st.trials.record_report(sweep, number, step, {"val_accuracy": accuracy}, attempt)
            clock.advance(3.0)
        final = i + 1 == len(path)
        st.leases.close(lease, TrialState.COMPLETE if final else TrialState.PAUSED)
    st.trials.upsert(sweep, number, state=TrialState.COMPLETE, ended_at=clock.time())
    st.close()


def resized_storage(folder: Path) -> str:
    """The storage's URL, under ``folder`` (see the module docstring)."""
    url = f"sqlite:///{folder / 'hf.db'}"
    st = Storage(url)
    for name, devices in ((ELASTIC, {"min": 1, "max": 4}), (FIXED, 1)):
        data = digits_sweep(name=name, storage=url, trial={"resources": {"devices": devices}})
        st.sweeps.create(name, parse_sweep(data).model_dump(mode="json"))
        st.sweeps.update(name, status=SweepStatus.DONE)
    st.close()
    _trial(url, ELASTIC, 0, PATH, END_STEP, 0.95)
    _trial(url, ELASTIC, 1, STEADY, 60, 0.9)
    _trial(url, FIXED, 0, [(1, ["cpu:0"])], 30, 0.9)
    return url


def launch_start(index: int) -> float:
    """When trial 0's launch ``index`` of :data:`PATH` started on the clock."""
    start = START
    for first, _ in PATH[:index]:
        reports = len(range(first, _next_first(first), EVERY))
        start += LAUNCH_S + 3.0 * reports
    return start


def _next_first(first: int) -> int:
    firsts = [f for f, _ in PATH] + [END_STEP + 1]
    return firsts[firsts.index(first) + 1]
