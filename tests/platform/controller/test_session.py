"""Closing a sweep's session: the summary, the tracker's view and the late runs' ids come from
one read of the sweep's trials (a fleet's workers all close a sweep as it ends, and each read
is of every trial)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.controller import open_session
from hyperfleet.platform.controller.session import close_session
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.tracking import NullTracker
from hyperfleet.spec.states import SweepStatus, TrialState
from hyperfleet.testing.sweeps import minimal_sweep


class _Resolved(NullTracker):
    """A tracker that created trial 1's run late (its stored id is still pending)."""

    def resolved(self) -> dict[int, str]:
        return {1: "run-of-1"}


@pytest.mark.parametrize("others_running", [False, True], ids=["last", "others-still-run"])
def test_closing_a_sweep_reads_its_trials_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, others_running: bool
) -> None:
    cfg = parse_sweep(minimal_sweep(name="close", storage=f"sqlite:///{tmp_path / 'hf.db'}",
                                 workdir=str(tmp_path / "runs")))  # fmt: skip
    storage = Storage(str(cfg.storage))
    tracker = _Resolved()
    session = open_session(cfg, storage, tracker, None)
    done = TrialState.COMPLETE
    storage.upsert_trial("close", 0, state=done, metrics={"loss": 0.5}, params={"x": 0.1})
    storage.upsert_trial("close", 1, state=done, metrics={"loss": 0.2}, params={"x": 0.3},
                         mlflow_run_id="pending:1")  # fmt: skip
    if others_running:
        storage.upsert_trial("close", 2, state=TrialState.RUNNING, params={"x": 0.9},
                             worker="elsewhere")  # fmt: skip
    reads: list[str] = []
    trials = Storage.trials

    def counted(self: Storage, sweep: str, state: TrialState | None = None) -> list:  # type: ignore[type-arg]
        reads.append(sweep)
        return trials(self, sweep, state)

    monkeypatch.setattr(Storage, "trials", counted)
    summary = close_session(session, interrupted=False)
    assert reads == ["close"]
    monkeypatch.undo()

    assert [t.number for t in summary.trials] == [0, 1, 2][: 3 if others_running else 2]
    best = summary.best()
    assert best is not None and best.number == 1
    again = Storage(str(cfg.storage))
    assert again.get_trial("close", 1).mlflow_run_id == "run-of-1"  # the late run's id
    sweep = again.get_sweep("close")
    if others_running:  # the last worker to leave ends it
        assert sweep.status != SweepStatus.DONE
        assert ("end_parent", ("null-1", "FINISHED")) not in tracker.calls
    else:
        assert sweep.status == SweepStatus.DONE
        assert any(what == "end_parent" for what, _ in tracker.calls)
    again.close()
