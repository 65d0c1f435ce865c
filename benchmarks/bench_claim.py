"""Where a claim's time goes: the parts of ``SweepDriver._claim`` timed one by one, with the
database round trips each makes, on one real PostgreSQL, by 1 or more threads claiming at once.

The parts, in the order a claim runs them: the count of RUNNING trials before the lock, the
wait for the sweep's claim lock (this process's lock, then the advisory lock), the count under
it, the scheduler's suggestion (Optuna's ``ask`` and one parameter written per dimension), the
RUNNING record, and the unlock. Round trips are the statements sent (SQLAlchemy's
``before_cursor_execute``) plus the connection checkouts (each one a ping when the pool pings
before use), counted per thread.

    python benchmarks/bench_claim.py --threads 1 --claims 200
    python benchmarks/bench_claim.py --threads 64 --claims 10
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.pool import Pool

from benchmarks.scale_harness import new_database, postgres, sweep_config
from hyperfleet.platform.clock import SystemClock
from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.controller import open_session
from hyperfleet.platform.schedulers import TrialState
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.tracking import NullTracker

PARTS = ("count", "lock wait", "count locked", "suggest", "record", "unlock")
_counts = threading.local()


def _statement(*_: Any) -> None:
    _counts.statements = getattr(_counts, "statements", 0) + 1


def _checkout(*_: Any) -> None:
    _counts.checkouts = getattr(_counts, "checkouts", 0) + 1


def _trips() -> int:
    return int(getattr(_counts, "statements", 0) + getattr(_counts, "checkouts", 0))


class Parts:
    """Per part: seconds and round trips of every claim (all threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seconds: dict[str, list[float]] = defaultdict(list)
        self.trips: dict[str, list[int]] = defaultdict(list)
        self.total: list[float] = []

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        t0, n0 = time.perf_counter(), _trips()
        yield
        dt, dn = time.perf_counter() - t0, _trips() - n0
        with self.lock:
            self.seconds[name].append(dt)
            self.trips[name].append(dn)


def claim(storage: Storage, session: Any, parts: Parts, worker: str) -> None:
    """One claim, as ``SweepDriver._claim`` makes it, part by part."""
    name, clock = session.name, SystemClock()
    t0 = time.perf_counter()
    with parts.part("count"):
        storage.trials.running_elsewhere(name, None)
    lock = storage.claim_lock(name)
    with parts.part("lock wait"):
        lock.__enter__()
    try:
        with parts.part("count locked"):
            storage.trials.running_elsewhere(name, None)
        with parts.part("suggest"):
            suggestion = session.scheduler.suggest()
        with parts.part("record"):
            now = clock.time()
            storage.trials.upsert(
                name, suggestion.trial_number, state=TrialState.RUNNING, host="bench", pid=1,
                worker=worker, heartbeat_at=now, started_at=now, ended_at=None, outcome=None,
            )  # fmt: skip
    finally:
        with parts.part("unlock"):
            lock.__exit__(None, None, None)
    with parts.lock:
        parts.total.append(time.perf_counter() - t0)


def run(url: str, threads: int, claims: int) -> Parts:
    workdir = Path(tempfile.mkdtemp(prefix="hf-claim-"))
    data = sweep_config("random", threads * claims + 10, 10**6, workdir)
    data["storage"] = url
    cfg = parse_sweep(data)
    Storage(url).close()
    setup = Storage(url)
    open_session(cfg, setup, NullTracker(), None)
    parts = Parts()
    barrier = threading.Barrier(threads)

    def loop(i: int) -> None:
        storage = Storage(url, create=False)
        session = open_session(cfg, storage, NullTracker(), None)
        claim(storage, session, Parts(), f"w{i}")  # warm: imports, caches, pool
        barrier.wait()
        for _ in range(claims):
            claim(storage, session, parts, f"w{i}")

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return parts


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def table(parts: Parts, threads: int) -> str:
    rows = [
        f"{threads} thread(s), {len(parts.total)} claims",
        "| part | round trips (mean) | ms p50 | ms p99 |",
        "| --- | --- | --- | --- |",
    ]
    ms: Callable[[float], str] = lambda s: f"{1000 * s:.2f}"  # noqa: E731
    for name in PARTS:
        sec, trips = parts.seconds[name], parts.trips[name]
        rows.append(f"| {name} | {statistics.fmean(trips):.1f} | {ms(_pct(sec, 0.5))} "
                    f"| {ms(_pct(sec, 0.99))} |")  # fmt: skip
    total_trips = sum(statistics.fmean(parts.trips[n]) for n in PARTS)
    rows.append(f"| **claim** | {total_trips:.1f} | {ms(_pct(parts.total, 0.5))} "
                f"| {ms(_pct(parts.total, 0.99))} |")  # fmt: skip
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--claims", type=int, default=100, help="claims per thread")
    args = ap.parse_args()
    event.listen(sa.engine.Engine, "before_cursor_execute", _statement)
    event.listen(Pool, "checkout", _checkout)
    with postgres() as server:
        print(table(run(new_database(server), args.threads, args.claims), args.threads))


if __name__ == "__main__":
    main()
