"""The number of ranks a trial's reports ran at (``hf_trials.sizes``): one ``[first step,
ranks]`` pair per size, added at each launch's first report, fenced like the report itself;
a trial that reports earlier steps again (it started over, or rewound) drops the later pairs.
A controller's launch records its lease's size."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperfleet.errors import Superseded
from hyperfleet.platform.launcher.simulated import curve
from hyperfleet.platform.storage import Storage
from hyperfleet.spec.states import TrialState
from hyperfleet.testing.controller import Sim


def _running(tmp_path: Path) -> Storage:
    storage = Storage(f"sqlite:///{tmp_path / 'hf.db'}")
    storage.sweeps.create("s", {})
    storage.trials.start_attempt("s", 0, state=TrialState.RUNNING)
    return storage


def test_a_resized_trial_keeps_one_pair_per_size_and_its_size_at_each_step(
    tmp_path: Path,
) -> None:
    storage = _running(tmp_path)
    for step, ranks in [(1, 1), (4, 2), (7, 2), (10, 4), (13, 1)]:
        storage.trials.record_size("s", 0, step, ranks, attempt=1)
    t = storage.trials.get("s", 0)
    assert t is not None and t.sizes == [[1, 1], [4, 2], [10, 4], [13, 1]]
    assert [t.size_at(s) for s in (0, 1, 3, 4, 9, 10, 12, 13, 99)] == [
        None, 1, 1, 2, 2, 4, 4, 1, 1,
    ]  # fmt: skip


def test_reporting_earlier_steps_again_drops_the_later_pairs(tmp_path: Path) -> None:
    storage = _running(tmp_path)
    for step, ranks in [(1, 1), (4, 2), (10, 4)]:
        storage.trials.record_size("s", 0, step, ranks, attempt=1)
    storage.trials.record_size("s", 0, 4, 1, attempt=1)  # back at step 4, on one rank
    t = storage.trials.get("s", 0)
    assert t is not None and t.sizes == [[1, 1]], "step 4 on runs at 1, as step 1 did"
    storage.trials.record_size("s", 0, 1, 2, attempt=1)  # started over, on two ranks
    t = storage.trials.get("s", 0)
    assert t is not None and t.sizes == [[1, 2]]


def test_a_superseded_copy_records_no_size(tmp_path: Path) -> None:
    storage = _running(tmp_path)
    storage.trials.record_size("s", 0, 1, 2, attempt=1)
    storage.trials.start_attempt("s", 0, state=TrialState.RUNNING)  # attempt 2 takes over
    with pytest.raises(Superseded):
        storage.trials.record_size("s", 0, 5, 4, attempt=1)
    t = storage.trials.get("s", 0)
    assert t is not None and t.sizes == [[1, 2]]


def test_a_controller_records_each_trial_at_its_leases_size(tmp_path: Path) -> None:
    script = curve(lambda params, step: float(params["x"]) / step, steps=10)
    changes = {"budget": {"trials": 3}, "trial": {"resources": {"devices": 2}}}
    sim = Sim(tmp_path, script, changes, devices=4)
    summary = sim.run(sim.controller())
    assert summary.state_counts["COMPLETE"] == 3
    assert [t.sizes for t in sim.trials()] == [[[1, 2]]] * 3
