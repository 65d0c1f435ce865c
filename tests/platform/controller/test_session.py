"""Closing a sweep's session: the summary, the tracker's view and the late runs' ids come from
one read of the sweep's trials (a fleet's workers all close a sweep as it ends, and each read
is of every trial)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.controller import open_session
from hyperfleet.platform.controller.session import SweepSession, close_session
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.trials import TrialStore
from hyperfleet.platform.tracking import NullTracker
from hyperfleet.spec.states import SweepStatus, TrialState
from hyperfleet.testing.sweeps import minimal_sweep


class _Resolved(NullTracker):
    """A tracker that created trial 1's run late (its stored id is still pending)."""

    def resolved(self) -> dict[int, str]:
        return {1: "run-of-1"}


def _session(tmp_path: Path, name: str, tracker: NullTracker) -> tuple[SweepSession, Storage]:
    cfg = parse_sweep(minimal_sweep(name=name, storage=f"sqlite:///{tmp_path / 'hf.db'}",
                                 workdir=str(tmp_path / "runs")))  # fmt: skip
    storage = Storage(str(cfg.storage))
    return open_session(cfg, storage, tracker, None), storage


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sweeps whose trials are read whole (``storage.trials.of``) from now on."""
    reads: list[str] = []
    trials = TrialStore.of

    def read(self: TrialStore, sweep: str, state: TrialState | None = None) -> list:  # type: ignore[type-arg]
        reads.append(sweep)
        return trials(self, sweep, state)

    monkeypatch.setattr(TrialStore, "of", read)
    return reads


@pytest.mark.parametrize("others_running", [False, True], ids=["last", "others-still-run"])
def test_closing_a_sweep_reads_its_trials_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, others_running: bool
) -> None:
    tracker = _Resolved()
    session, storage = _session(tmp_path, "close", tracker)
    done = TrialState.COMPLETE
    storage.trials.upsert("close", 0, state=done, metrics={"loss": 0.5}, params={"x": 0.1})
    storage.trials.upsert("close", 1, state=done, metrics={"loss": 0.2}, params={"x": 0.3},
                         mlflow_run_id="pending:1")  # fmt: skip
    if others_running:
        storage.trials.upsert("close", 2, state=TrialState.RUNNING, params={"x": 0.9},
                             worker="elsewhere")  # fmt: skip
    reads = _count_reads(monkeypatch)
    summary = close_session(session, interrupted=False)
    assert reads == ["close"]
    monkeypatch.undo()

    assert [t.number for t in summary.trials] == [0, 1, 2][: 3 if others_running else 2]
    best = summary.best()
    assert best is not None and best.number == 1
    again = Storage(storage.url)
    assert again.trials.get("close", 1).mlflow_run_id == "run-of-1"  # the late run's id
    sweep = again.sweeps.get("close")
    if others_running:  # the last worker to leave ends it
        assert sweep.status != SweepStatus.DONE
        assert ("end_parent", ("null-1", "FINISHED")) not in tracker.calls
    else:
        assert sweep.status == SweepStatus.DONE
        assert any(what == "end_parent" for what, _ in tracker.calls)
    again.close()


@pytest.mark.parametrize("case", ["others-still-run", "last", "ended-by-another"])
def test_a_fleet_worker_counts_a_sweep_others_run_or_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    tracker = _Resolved()
    session, storage = _session(tmp_path, "fleet", tracker)
    for n, loss in enumerate([0.5, 0.2]):
        storage.trials.upsert("fleet", n, state=TrialState.COMPLETE, metrics={"loss": loss},
                             params={"x": 0.1 * n}, mlflow_run_id=f"pending:{n}")  # fmt: skip
    storage.trials.upsert("fleet", 2, state=TrialState.FAIL, params={"x": 0.9})
    if case == "others-still-run":
        storage.trials.upsert("fleet", 3, state=TrialState.RUNNING, worker="elsewhere")
    if case == "ended-by-another":
        storage.sweeps.update("fleet", status=SweepStatus.DONE)
    reads = _count_reads(monkeypatch)
    summary = close_session(session, interrupted=False, counts_only=True)
    monkeypatch.undo()

    counts = {"COMPLETE": 2, "PRUNED": 0, "FAIL": 1}
    if case == "others-still-run":
        counts["RUNNING"] = 1
    assert summary.state_counts == counts
    assert summary.metrics == ["loss"] and summary.sweep == "fleet"
    again = Storage(storage.url)
    assert again.trials.get("fleet", 1).mlflow_run_id == "run-of-1"  # read for the late run only
    ended = any(what == "end_parent" for what, _ in tracker.calls)
    if case == "last":  # it ends the sweep: read whole, once, as without counts_only
        assert reads == ["fleet"] and [t.number for t in summary.trials] == [0, 1, 2]
        assert ended and again.sweeps.get("fleet").status == SweepStatus.DONE
    else:  # counted: the trials read only for the run created late, the sweep left as it is
        assert summary.trials == [] and summary.best() is None and not ended
        assert reads == ["fleet"]
        assert again.sweeps.get("fleet").status == (
            SweepStatus.DONE if case == "ended-by-another" else SweepStatus.RUNNING
        )
    again.close()


def test_a_fleet_worker_with_no_late_run_does_not_read_the_trials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session, storage = _session(tmp_path, "quiet", NullTracker())
    storage.trials.upsert("quiet", 0, state=TrialState.COMPLETE, metrics={"loss": 0.1})
    storage.sweeps.update("quiet", status=SweepStatus.DONE)
    reads = _count_reads(monkeypatch)
    summary = close_session(session, interrupted=False, counts_only=True)
    assert reads == [] and summary.state_counts["COMPLETE"] == 1 and summary.trials == []
