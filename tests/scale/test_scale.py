"""Scale: the harness's smallest case on real PostgreSQL, and the rules that keep a fleet's cost
gentle -- one bounded connection pool per process, the claim lock's queue inside a process,
stale and running trials read by the database (the cap on what TPE and the GP read of a long
sweep: tests/platform/schedulers/test_history.py)."""

from __future__ import annotations

import math
import threading
import time

import pytest

from benchmarks.scale_harness import run_case
from benchmarks.scale_measures import gc_pauses, machine_busy, slow_claims, timeline
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.engine import (
    HEARTBEAT_POOL_OVERFLOW,
    HEARTBEAT_POOL_SIZE,
    POOL_OVERFLOW,
    POOL_SIZE,
)
from hyperfleet.spec.states import TrialState


@pytest.mark.postgres
def test_the_harness_smallest_case_claims_each_trial_once(postgres_server: str) -> None:
    r = run_case(postgres_server, "random", 2, 6, trial_s=0.1, ramp_s=0.0, window=3,
                 sample_s=0.1)  # fmt: skip
    assert r.trials_done == 6 and r.claims == 6 and r.claimed_twice == 0
    assert r.loops_failed == 0, r.first_loop_error
    # the work's pool, the heartbeats', Optuna's, the sampler
    beats = HEARTBEAT_POOL_SIZE + HEARTBEAT_POOL_OVERFLOW
    assert 1 <= r.connections_max <= POOL_SIZE + POOL_OVERFLOW + beats + 3
    assert r.xact_per_s > 0 and r.claim_p99_ms >= r.claim_p50_ms > 0
    assert r.platform_first_ms > 0 and 0 < r.waiting_share < 1
    assert 0 < r.cpu_busy_mean <= 1 and 0 < r.cpu_busy_peak <= 1  # read from /proc/stat
    assert r.runnable_max >= 1  # the sampler itself runs when it reads
    assert sum(row.get("claims", 0) for row in r.timeline) == 6
    assert 0 <= r.claims_slow_in_gc <= r.claims_slow <= r.claims


def test_the_machines_busy_share_is_read_whole_and_in_its_busiest_window() -> None:
    # a sample a second for 20 s (100 ticks a second): busy in full from 8 to 12 s, idle else
    busy = [0.0] * 9 + [100.0, 200.0, 300.0, 400.0] + [400.0] * 8
    samples = [{"at": float(t), "cpu_busy": b, "cpu_total": 100.0 * t}
               for t, b in enumerate(busy)]  # fmt: skip
    whole, peak = machine_busy(samples, window_s=4.0)
    assert whole == 0.2 and peak == 1.0
    assert machine_busy(samples[:3], window_s=4.0) == (0.0, 0.0)  # shorter than a window
    assert all(math.isnan(x) for x in machine_busy(samples[:1]))  # nothing to read


def test_a_slow_claim_is_read_against_its_own_processs_collections() -> None:
    # process 0: a claim of 0.3 s from 10 s that a collection from 10.1 to 10.2 s overlapped,
    # and a fast one; process 1: a slow claim at 20 s, its process collected at 10 s only
    parts = [
        ([(10.0, 0.3), (11.0, 0.01)], [(10.1, 0.1, 2)]),
        ([(20.0, 0.2)], [(10.0, 0.5, 2), (30.0, 0.01, 0)]),
    ]
    out = slow_claims(parts, over=0.1, since=5.0)
    assert out["claims_slow"] == 2 and out["claims_slow_in_gc"] == 1
    assert out["gc_pauses"] == 3 and out["gc_pause_max_ms"] == 500.0
    assert out["slowest_claims"][0] == {"at_s": 5.0, "ms": 300.0, "gc_ms": 100.0, "process": 0}
    assert out["slowest_claims"][1]["gc_ms"] == 0.0  # process 0's collection is not its own


def test_the_timeline_puts_claims_collections_and_closes_in_their_slice() -> None:
    part = {"claims": [(1.0, 0.2), (2.0, 0.01), (7.0, 0.01)], "gc": [(6.0, 0.4, 2)],
            "closes": [(8.0, 0.5)]}  # fmt: skip
    samples = [{"at": float(t), "cpu_busy": 50.0 * t, "cpu_total": 100.0 * t, "runnable": t}
               for t in range(1, 10)]  # fmt: skip
    rows = timeline([part], samples, since=0.0, every=5.0, over=0.1)
    assert [r["at_s"] for r in rows] == [0.0, 5.0]
    assert rows[0]["claims"] == 2 and rows[0]["slow"] == 1 and rows[0]["busy"] == 0.5
    assert rows[1]["gc_s"] == 0.4 and rows[1]["closes"] == 1 and rows[1]["close_s"] == 0.5
    assert rows[1]["runnable"] == 9 and rows[1]["slow"] == 0


def test_collections_are_recorded_while_watched_only() -> None:
    import gc

    pauses: list[tuple[float, float, int]] = []
    with gc_pauses(pauses):
        kept = [[] for _ in range(1_000_000)]  # a full collection walks them all: 20+ ms
        gc.collect()
        del kept
    seen = len(pauses)
    gc.collect()
    assert any(g == 2 for _, _, g in pauses)
    assert all(d >= 0.005 for _, d, _ in pauses)  # the short ones are not kept
    assert len(pauses) == seen  # removed on exit


@pytest.mark.postgres
def test_storages_of_one_process_share_one_pool(postgres_url: str) -> None:
    a, b = Storage(postgres_url), Storage(postgres_url)
    assert a.engine is b.engine and a.optuna is b.optuna
    a.close()
    assert b.trials.of("none") == []  # still open for the other user
    c = Storage(postgres_url, create=False)
    assert c.engine is b.engine
    b.close()
    c.close()
    d = Storage(postgres_url, create=False)
    assert d.engine is not c.engine  # the last user closed it: a new one
    d.close()


@pytest.mark.postgres
def test_more_threads_than_pooled_connections_take_the_claim_lock_in_turn(
    postgres_url: str,
) -> None:
    storage = Storage(postgres_url)
    inside, most, done = [0], [0], []
    guard = threading.Lock()

    def claim() -> None:
        with storage.claim_lock("s"):
            with guard:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            storage.trials.running_elsewhere("s", None)  # the holder needs a connection of its own
            time.sleep(0.01)
            with guard:
                inside[0] -= 1
        done.append(1)

    threads = [threading.Thread(target=claim) for _ in range(POOL_SIZE + POOL_OVERFLOW + 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    storage.close()
    assert len(done) == len(threads) and most[0] == 1


def test_stale_trials_are_read_by_the_database(tmp_path) -> None:  # type: ignore[no-untyped-def]
    storage = Storage(f"sqlite:///{tmp_path / 'hf.db'}")
    now = storage.now()
    for n, beat in enumerate([now, now - 100, None]):
        storage.trials.upsert("s", n, state=TrialState.RUNNING, worker="w", host="elsewhere",
                             pid=1, heartbeat_at=beat)  # fmt: skip
    storage.trials.upsert("s", 3, state=TrialState.COMPLETE, heartbeat_at=now - 100)
    assert [t.number for t in storage.stale.running("s", 30)] == [1, 2]
    assert [t.number for t in storage.trials.of("s", TrialState.RUNNING)] == [0, 1, 2]
    storage.close()
