"""The worker's heartbeat thread: a look for stale trials right after a heartbeat reuses it
instead of beating twice (a fleet's looks would double its heartbeats), and one after a pause
beats afresh; it does not wait for the worker's work to give back a pooled connection."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from hyperfleet.platform.controller.heartbeat import Heartbeat
from hyperfleet.platform.storage import Storage, WorkerRecord, engine


def _beat_at(storage: Storage, worker: str) -> float:
    (row,) = [w for w in storage.workers.all() if w.id == worker]
    return row.heartbeat_at


def test_a_heartbeat_within_the_interval_is_not_repeated(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hf.db'}"
    storage = Storage(url)
    storage.workers.register(
        WorkerRecord("w", "vm", 1, "default", [], None, None, 0.0, 0.0, "active")
    )
    beat = Heartbeat(url, "w", every=3.0)  # not started: beats only when told
    beat.beat_now()
    first = _beat_at(storage, "w")
    assert first > 0.0
    time.sleep(0.05)
    beat.beat_now(unless_within=3.0)  # began 50 ms ago: fresh
    assert _beat_at(storage, "w") == first
    beat.beat_now(unless_within=0.01)  # began longer ago than that: beats
    assert _beat_at(storage, "w") > first
    beat.storage.close()
    storage.close()


@pytest.mark.postgres
def test_a_heartbeat_does_not_wait_for_the_work_pool(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every connection of the process's work pool is held (a burst of launches, a queue of
    claims): the heartbeat still beats at once, on a lane of its own."""
    monkeypatch.setattr(engine, "POOL_SIZE", 1)
    monkeypatch.setattr(engine, "POOL_OVERFLOW", 0)
    storage = Storage(postgres_url)  # this test's database: a new engine, one connection
    storage.workers.register(
        WorkerRecord("w", "vm", 1, "default", [], None, None, 0.0, 0.0, "active")
    )
    beat = Heartbeat(postgres_url, "w", every=3.0)
    assert beat.storage.engine is not storage.engine
    with storage.engine.connect() as held:
        held.execute(sa.text("SELECT 1"))  # the work pool's only connection, checked out
        started = time.monotonic()
        beat.beat_now()
        waited = time.monotonic() - started
    assert waited < 10.0  # not the pool's 30 s timeout
    assert _beat_at(storage, "w") > 0.0
    beat.storage.close()
    storage.close()


def test_a_failed_heartbeat_says_it_tries_again_not_that_the_worker_stopped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An outage that outlasts a beat's retries ends that beat only: the warning names the
    outage and the next beat, not the command's "stopped cleanly" (the worker runs on)."""
    from hyperfleet.platform.storage.retry import retrying

    url = f"sqlite:///{tmp_path / 'hf.db'}"
    Storage(url).close()
    beat = Heartbeat(url, "w", every=0.05)

    def unreachable() -> None:
        raise sa.exc.OperationalError("SELECT 1", {}, Exception("database is locked"))

    beat.storage.workers.beat = lambda *a, **k: retrying(unreachable, budget_s=0.0)  # type: ignore[method-assign]
    with caplog.at_level("WARNING", logger="hyperfleet.platform.controller.heartbeat"):
        beat.start()
        deadline = time.monotonic() + 10
        while "heartbeat failed" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.02)
        beat.stop()
    line = next(r.getMessage() for r in caplog.records if "heartbeat failed" in r.getMessage())
    assert "unreachable for 0 s (database is locked)" in line
    assert "the next beat tries again in 0.05 s" in line
    assert "stopped" not in line


def test_a_heartbeat_stamps_the_worker_and_only_its_running_trials(db_url: str) -> None:
    """One statement on PostgreSQL, two on SQLite, the same effect: the worker's row and its
    RUNNING trials are stamped; another worker's trials and its own ended ones are not; the
    trials still RUNNING under it are returned (the fencing list)."""
    from hyperfleet.spec.states import WorkerState

    storage = Storage(db_url)
    storage.sweeps.create("s", {})
    for w in ("w", "other"):
        storage.workers.register(
            WorkerRecord(w, "vm", 1, "default", [], None, None, 0.0, 0.0, "active")
        )
    for number, worker, state in [(0, "w", "RUNNING"), (1, "w", "RUNNING"), (2, "w", "COMPLETE"),
                                  (3, "other", "RUNNING")]:  # fmt: skip
        storage.trials.upsert("s", number, state=state, worker=worker, heartbeat_at=0.0)
    assert storage.workers.beat("w") == {("s", 0), ("s", 1)}
    beats = {t.number: t.heartbeat_at for t in storage.trials.of("s")}
    assert beats[0] > 0.0 and beats[1] > 0.0 and beats[2] == 0.0 and beats[3] == 0.0
    assert _beat_at(storage, "w") > 0.0 and _beat_at(storage, "other") == 0.0
    storage.workers.beat("w", WorkerState.STOPPED)
    assert [x.state for x in storage.workers.all() if x.id == "w"] == ["stopped"]
    storage.close()
