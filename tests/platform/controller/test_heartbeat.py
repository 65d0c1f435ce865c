"""The worker's heartbeat thread: a look for stale trials right after a heartbeat reuses it
instead of beating twice (a fleet's looks would double its heartbeats), and one after a pause
beats afresh."""

from __future__ import annotations

import time
from pathlib import Path

from hyperfleet.platform.controller.heartbeat import Heartbeat
from hyperfleet.platform.storage import Storage, WorkerRecord


def _beat_at(storage: Storage, worker: str) -> float:
    (row,) = [w for w in storage.workers() if w.id == worker]
    return row.heartbeat_at


def test_a_heartbeat_within_the_interval_is_not_repeated(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hf.db'}"
    storage = Storage(url)
    storage.register_worker(
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
