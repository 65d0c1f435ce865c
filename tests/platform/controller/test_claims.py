"""Claims with suggestions made ahead (``budget.ahead``): a claim takes a trial the scheduler
made before it was asked for, in one short transaction; each trial goes to one worker, the
budget and ``max_concurrent`` hold, and a suggestion is always recorded (RUNNING or ahead), so
the look for phantoms leaves them alone. On PostgreSQL a take does not wait for the claim lock:
claims do not queue behind the scheduler."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from hyperfleet.platform.clock import SystemClock, VirtualClock
from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.controller import claims as claims_mod
from hyperfleet.platform.controller import depth as depth_mod
from hyperfleet.platform.controller import open_session
from hyperfleet.platform.controller.claims import TOP_UP_EVERY_S, WORKERS_PER_AHEAD, Claims
from hyperfleet.platform.controller.recovery import requeue_phantoms
from hyperfleet.platform.controller.session import SweepSession
from hyperfleet.platform.launcher.simulated import curve
from hyperfleet.platform.storage import Storage, WorkerRecord
from hyperfleet.platform.storage import ahead as ahead_mod
from hyperfleet.platform.tracking import NullTracker
from hyperfleet.spec.states import TrialState, WorkerState
from hyperfleet.testing.controller import Sim
from hyperfleet.testing.sweeps import minimal_sweep
from tests.platform.controller.locks import count_claim_locks

GRID_SPACE = {"x": {"type": "float", "low": 0.0, "high": 1.0, "step": 0.05}}


def _session(url: str, tmp_path: Path, scheduler: str = "random", **budget: Any) -> SweepSession:
    cfg = parse_sweep(
        minimal_sweep(
            name="ahead", storage=url, workdir=str(tmp_path / "runs"),
            budget={"trials": 20, "max_concurrent": 20, **budget},
            scheduler={"type": scheduler, "seed": 0},
            **({"space": GRID_SPACE} if scheduler == "grid" else {}),
        )
    )  # fmt: skip
    return open_session(cfg, Storage(url), NullTracker(), None)


@contextlib.contextmanager
def _held_elsewhere(s: SweepSession, release_after: float = 30.0) -> Iterator[None]:
    """The sweep's claim lock held by another thread (another worker) for the block, or
    for ``release_after`` seconds if that is sooner."""
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        with s.storage.claim_lock(s.name):
            held.set()
            done.wait(release_after)

    t = threading.Thread(target=hold)
    t.start()
    assert held.wait(30)
    try:
        yield
    finally:
        done.set()
        t.join(30)


def _end(s: SweepSession, number: int) -> None:
    s.scheduler.on_trial_end(number, TrialState.COMPLETE, [float(number)])
    s.storage.trials.upsert(s.name, number, state=TrialState.COMPLETE)


@pytest.fixture
def long_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refills that are not cut short by their real-time slice (1 s: a busy machine's three
    suggestions may take longer), for the tests that count what a refill makes."""
    monkeypatch.setattr(claims_mod, "REFILL_SLICE_S", 30.0)


@pytest.mark.usefixtures("long_slice")
def test_a_refill_makes_the_depth_ahead_and_the_next_claims_take_them(tmp_path: Path) -> None:
    s = _session(f"sqlite:///{tmp_path / 'hf.db'}", tmp_path, ahead=3, trials=7)
    claims = Claims(s, SystemClock(), "w1", 30.0)
    first = claims.claim()
    assert first is not None and first.trial_number == 0  # its own suggestion only
    assert s.storage.ahead.of(s.name) == []
    assert claims.refill() == 3  # after its launch: up to the depth
    assert [n for n, _ in s.storage.ahead.of(s.name)] == [1, 2, 3]
    assert requeue_phantoms(s) == []  # ahead is recorded: not a phantom
    study = {t.number: t.params for t in s.scheduler.study.get_trials()}  # type: ignore[attr-defined]
    second = claims.claim()
    assert second is not None and second.trial_number == 1
    assert dict(second.params) == study[1]  # the scheduler's own params, through the table
    assert claims.refill() == 0  # two left of three: more than half
    third = claims.claim()
    assert third is not None and third.trial_number == 2
    assert claims.refill() == 2  # one left: made up to three again (trials 4 and 5)
    assert [n for n, _ in s.storage.ahead.of(s.name)] == [3, 4, 5]
    assert [c.trial_number for c in (claims.claim(), claims.claim())] == [3, 4]  # type: ignore[union-attr]
    with _held_elsewhere(s):  # another worker holds the claim lock: no refill now
        assert claims.refill() == 0
    fifth = claims.claim()  # no refill until this worker's next take
    assert fifth is not None and fifth.trial_number == 5
    assert claims.refill() == 1  # trial 6: the budget (7) is used up after it
    assert [c.trial_number for c in iter(claims.claim, None)] == [6]
    running = [t.number for t in s.storage.trials.of(s.name, TrialState.RUNNING)]
    assert running == list(range(7)) and s.storage.ahead.of(s.name) == []
    assert len(s.scheduler.study.get_trials()) == 7  # type: ignore[attr-defined]
    s.storage.close()


@pytest.mark.usefixtures("long_slice")
def test_a_claim_that_waited_for_the_lock_makes_more_for_the_queue(tmp_path: Path) -> None:
    s = _session(f"sqlite:///{tmp_path / 'hf.db'}", tmp_path, ahead=3)
    # a queue: others hold the lock meanwhile, for many times one suggestion's time even on a
    # busy machine (the claim makes about its wait over its own suggestion's time, up to 3)
    with _held_elsewhere(s, release_after=3.0):
        first = Claims(s, SystemClock(), "w1", 30.0).claim()
    assert first is not None and first.trial_number == 0
    assert [n for n, _ in s.storage.ahead.of(s.name)] == [1, 2, 3]  # for the claims behind it
    s.storage.close()


def test_a_claim_makes_more_for_the_queue_for_a_slice_of_time_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = _session(f"sqlite:///{tmp_path / 'hf.db'}", tmp_path, ahead=3)
    monkeypatch.setattr(claims_mod, "REFILL_SLICE_S", 0.0)  # the slice is over at once
    with _held_elsewhere(s, release_after=0.5):
        first = Claims(s, SystemClock(), "w1", 30.0).claim()
    assert first is not None and first.trial_number == 0
    assert s.storage.ahead.of(s.name) == []  # its own only
    s.storage.close()


def test_a_full_sweep_takes_nothing_and_a_dead_refiller_leaves_a_phantom(tmp_path: Path) -> None:
    s = _session(f"sqlite:///{tmp_path / 'hf.db'}", tmp_path, ahead=2, max_concurrent=1)
    claims = Claims(s, SystemClock(), "w1", 30.0)
    assert claims.claim() is not None and claims.refill() == 2
    assert claims.claim() is None  # max_concurrent: 1 runs
    assert [n for n, _ in s.storage.ahead.of(s.name)] == [1, 2]  # untouched
    _end(s, 0)
    taken = claims.claim()
    assert taken is not None and taken.trial_number == 1
    lost = s.scheduler.suggest()  # a refiller that died before keeping what it made
    assert lost is not None
    assert requeue_phantoms(s) == [lost.trial_number]  # found, back in the queue
    s.storage.close()


def test_a_claim_of_a_spent_sweep_does_not_queue_for_the_lock(
    postgres_url: str, tmp_path: Path
) -> None:
    """The budget is used and nothing waits or is ahead: an idle worker's claim says so
    without the claim lock (a thousand of them asked every few seconds at a sweep's end);
    once a trial is requeued, claims take the lock again and get it."""
    s = _session(postgres_url, tmp_path, trials=2, ahead=2)
    claims = Claims(s, SystemClock(), "w1", 30.0)
    assert claims.claim() is not None and claims.claim() is not None
    taken = count_claim_locks(s.storage)
    assert s.scheduler.exhausted()
    assert claims.claim() is None and taken == []
    s.scheduler.requeue(0)  # its worker died: back in the queue
    assert not s.scheduler.exhausted()
    again = claims.claim()
    assert again is not None and again.trial_number == 0 and taken == [s.name]
    s.storage.close()


def _register_workers(s: SweepSession, active: int, stopped: int) -> None:
    now = time.time()
    for i in range(active + stopped):
        state = WorkerState.ACTIVE if i < active else WorkerState.STOPPED
        s.storage.workers.register(
            WorkerRecord(
                id=f"w{i}", host="h", pid=i, pool="p", devices=[], address=None, sweeps=None,
                started_at=now, heartbeat_at=now, state=state,
            )
        )  # fmt: skip


def test_the_default_depth_is_one_per_32_live_workers_on_postgresql(
    postgres_url: str, tmp_path: Path
) -> None:
    s = _session(postgres_url, tmp_path, scheduler="tpe")
    assert s.scheduler.learns_from_results()
    _register_workers(s, 2 * WORKERS_PER_AHEAD, 5)
    assert Claims(s, SystemClock(), "w0", 30.0).depth() == 2  # the stopped ones do not count
    assert Claims(s, SystemClock(), "w0", 30.0).depth() == 2
    sqlite = _session(f"sqlite:///{tmp_path / 'hf.db'}", tmp_path / "one-host")
    assert Claims(sqlite, SystemClock(), "w0", 30.0).depth() == 0  # one host: none
    s.storage.close()
    sqlite.storage.close()


@pytest.mark.parametrize("scheduler", ["random", "qmc", "grid"])
def test_a_search_that_does_not_learn_keeps_one_ahead_per_live_worker(
    postgres_url: str, tmp_path: Path, scheduler: str
) -> None:
    s = _session(postgres_url, tmp_path, scheduler=scheduler)
    assert not s.scheduler.learns_from_results()
    _register_workers(s, 40, 3)
    assert Claims(s, SystemClock(), "w0", 30.0).depth() == 40
    s.storage.close()


def test_a_new_sweep_starts_with_the_queue_a_full_fleet_keeps(
    postgres_url: str, tmp_path: Path
) -> None:
    """At its creation a random sweep makes one suggestion ahead per worker it may run at
    once (up to its budget), so a fleet's first claims, all at once, take them without the
    claim lock; continuing the sweep makes none."""
    s = _session(postgres_url, tmp_path, trials=30, max_concurrent=8)
    assert [n for n, _ in s.storage.ahead.of(s.name)] == list(range(8))
    again = _session(postgres_url, tmp_path, trials=30, max_concurrent=8)  # another worker
    assert len(s.storage.ahead.of(s.name)) == 8 and len(again.scheduler.study.get_trials()) == 8  # type: ignore[attr-defined]
    taken = count_claim_locks(again.storage)
    firsts = [Claims(again, SystemClock(), f"w{i}", 30.0).claim() for i in range(8)]
    assert [f.trial_number for f in firsts if f is not None] == list(range(8)) and taken == []
    s.storage.close()
    again.storage.close()


@pytest.mark.parametrize(
    ("scheduler", "budget", "made"),
    [
        ("random", {"trials": 5, "max_concurrent": 8}, 5),  # the budget first
        ("random", {"max_concurrent": 8, "ahead": 0}, 0),  # turned off
        ("random", {"max_concurrent": 8, "ahead": 3}, 3),  # as given
        ("tpe", {"max_concurrent": 64}, 2),  # a search that learns: one per 32
        ("tpe", {"max_concurrent": 20}, 0),
    ],
)
def test_a_new_sweeps_first_fill_follows_its_depth(
    postgres_url: str, tmp_path: Path, scheduler: str, budget: dict[str, int], made: int
) -> None:
    s = _session(postgres_url, tmp_path, scheduler=scheduler, **budget)
    assert len(s.storage.ahead.of(s.name)) == made
    assert requeue_phantoms(s) == []  # every one recorded
    s.storage.close()


def test_a_new_sweeps_first_fill_is_bounded_in_time_and_none_on_sqlite(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sqlite = _session(f"sqlite:///{tmp_path / 'hf.db'}", tmp_path / "one-host")
    assert sqlite.storage.ahead.of(sqlite.name) == []  # one host: none
    sqlite.storage.close()
    monkeypatch.setattr(depth_mod, "FIRST_FILL_S", 0.0)  # no time for any
    s = _session(postgres_url, tmp_path)
    assert s.storage.ahead.of(s.name) == [] and s.scheduler.study.get_trials() == []  # type: ignore[attr-defined]
    s.storage.close()


@pytest.mark.usefixtures("long_slice")
def test_a_worker_tops_the_queue_ahead_up_between_launches(tmp_path: Path) -> None:
    """A worker whose take left fewer than half of the depth ahead makes more on its loop's
    ticks too, not only after a launch: at most every few seconds, for at most a slice of
    time each, and no more once the budget is used up."""
    s = _session(f"sqlite:///{tmp_path / 'hf.db'}", tmp_path, ahead=4, trials=7)
    clock = VirtualClock()
    claims = Claims(s, clock, "w1", 30.0)
    assert claims.top_up() == 0  # nothing taken yet: nothing known short
    assert claims.claim() is not None
    with _held_elsewhere(s):  # the refill after its launch found the lock held
        assert claims.refill() == 0
    assert s.storage.ahead.of(s.name) == []
    assert claims.top_up() == 4  # a tick of its loop, with no launch
    assert [n for n, _ in s.storage.ahead.of(s.name)] == [1, 2, 3, 4]
    taken = [claims.claim() for _ in range(3)]
    assert [t.trial_number for t in taken if t is not None] == [1, 2, 3]
    assert claims.top_up() == 0  # one ahead, but the last top-up was just now
    clock.advance(TOP_UP_EVERY_S)
    assert claims.top_up() == 2  # trials 5 and 6: the budget (7) is used up
    clock.advance(TOP_UP_EVERY_S)
    assert [n for n, _ in s.storage.ahead.of(s.name)] == [4, 5, 6]
    other = Claims(s, clock, "w2", 30.0)  # a worker that did not see the budget run out
    assert other.claim() is not None and other.claim() is not None
    assert other.top_up() == 0  # the scheduler's count says the budget is used up
    clock.advance(TOP_UP_EVERY_S)
    lock = s.storage.try_claim_lock
    s.storage.try_claim_lock = None  # type: ignore[assignment,method-assign]
    assert other.top_up() == 0  # and it does not ask for the lock again
    s.storage.try_claim_lock = lock  # type: ignore[method-assign]
    assert claims.top_up() == 0 and len(s.scheduler.study.get_trials()) == 7  # type: ignore[attr-defined]
    s.storage.close()


def test_a_refill_stops_after_its_slice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A refill runs in the worker's loop: it makes suggestions for a slice of time, and the
    next one goes on."""
    s = _session(f"sqlite:///{tmp_path / 'hf.db'}", tmp_path, ahead=4)
    claims = Claims(s, VirtualClock(), "w1", 30.0)
    assert claims.claim() is not None
    monkeypatch.setattr(claims_mod, "REFILL_SLICE_S", 0.0)
    assert claims.refill() == 0 and s.storage.ahead.of(s.name) == []
    monkeypatch.setattr(claims_mod, "REFILL_SLICE_S", 30.0)
    assert claims.refill() == 4  # its view after the last one: still short
    s.storage.close()


def test_a_take_does_not_wait_for_the_claim_lock_on_postgresql(
    postgres_url: str, tmp_path: Path
) -> None:
    s = _session(postgres_url, tmp_path, ahead=4)  # four made at the sweep's creation
    mine = Claims(s, SystemClock(), "w1", 30.0)
    assert mine.claim() is not None and [n for n, _ in s.storage.ahead.of(s.name)] == [1, 2, 3]
    got: list[Any] = []
    other = _session(postgres_url, tmp_path, ahead=4)  # another worker's connection
    with s.storage.claim_lock(s.name):  # a refill (or a slow suggestion) holds it
        t = threading.Thread(
            target=lambda: got.append(Claims(other, SystemClock(), "w2", 30.0).claim())
        )
        t.start()
        t.join(timeout=20)
        assert [g.trial_number for g in got] == [1]  # taken while the lock was held
    s.storage.close()
    other.storage.close()


def test_a_take_on_postgresql_is_one_statement_that_records_the_claim(
    postgres_url: str, tmp_path: Path
) -> None:
    """The take's advisory lock is never held across a round trip to the client: the whole
    take (the row, the lock, the count, the move to a RUNNING record) is one call of the
    database's function, in its own transaction; its record is the claim's."""
    s = _session(postgres_url, tmp_path, ahead=3)  # three made at creation
    claims = Claims(s, SystemClock(), "w1", 30.0)
    assert claims.claim() is not None  # the function is made at the first take
    seen: list[str] = []
    listen = lambda *a: seen.append(" ".join(a[2].split()[:4]))  # noqa: E731
    sa.event.listen(s.storage.engine, "before_cursor_execute", listen)
    try:
        taken = s.storage.ahead.take(s.name, 20, **claims._fields())
    finally:
        sa.event.remove(s.storage.engine, "before_cursor_execute", listen)
    assert taken is not None and taken[0][0] == 1 and taken[1] == 1
    assert seen == ["SELECT taken, taken_params, left_ahead"]
    (record,) = [t for t in s.storage.trials.of(s.name) if t.number == 1]
    assert record.state == TrialState.RUNNING and record.worker == "w1"
    assert record.heartbeat_at == record.started_at and record.started_at is not None
    assert record.attempts == 0 and record.params == {} and record.ended_at is None
    with pytest.raises(ValueError, match="a take records a claim's fields"):
        s.storage.ahead.take(s.name, 20, state=TrialState.RUNNING)
    s.storage.close()


def test_a_take_without_the_right_to_make_the_function_runs_as_statements(
    postgres_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A database user granted only the tables' rows cannot make the take's function: the
    takes run as separate statements (a warning says so once), and a function dropped since
    it was made is made again."""
    s = _session(postgres_url, tmp_path, ahead=3)  # three made at creation
    role = f"hf_rows_{postgres_url.rsplit('/', 1)[1]}"  # roles are the server's: one per test
    with s.storage.engine.begin() as conn:
        conn.execute(sa.text(f"CREATE ROLE {role} LOGIN"))
        conn.execute(sa.text(f"GRANT USAGE ON SCHEMA public TO {role}"))
        conn.execute(sa.text("REVOKE CREATE ON SCHEMA public FROM PUBLIC"))
        conn.execute(sa.text(
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}"
        ))  # fmt: skip
        conn.execute(sa.text(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}"))
    rows_only = Storage(postgres_url.replace("//hf@", f"//{role}@"), create=False)
    fields = Claims(s, SystemClock(), "w1", 30.0)._fields()
    with caplog.at_level("WARNING", logger="hyperfleet.platform.storage.ahead"):
        first = rows_only.ahead.take(s.name, 20, **fields)
        second = rows_only.ahead.take(s.name, 20, **fields)
    assert first is not None and second is not None
    assert [first[0][0], second[0][0]] == [0, 1] and second[1] == 1
    assert sum("cannot make the function" in r.getMessage() for r in caplog.records) == 1
    assert s.storage.ahead.take(s.name, 20, **fields) is not None  # its owner makes it
    with s.storage.engine.begin() as conn:
        conn.execute(sa.text(f"DROP FUNCTION {ahead_mod.TAKE_FUNCTION}({ahead_mod._TAKE_ARGS})"))
    s.storage.ahead.put(s.name, [(9, {"x": 0.5})])
    again = s.storage.ahead.take(s.name, 20, **fields)
    assert again is not None and again[0] == (9, {"x": 0.5})
    rows_only.close()
    s.storage.close()


def test_a_take_counts_the_running_trials_after_a_take_in_flight_commits(
    postgres_url: str, tmp_path: Path
) -> None:
    """``max_concurrent`` 2, one running: a take in flight (it holds the takes' lock and has
    recorded the second) makes another worker's take wait, then find the sweep full."""
    s = _session(postgres_url, tmp_path, ahead=3, max_concurrent=2)  # three made at creation
    mine = Claims(s, SystemClock(), "w1", 30.0)
    assert mine.claim() is not None and len(s.storage.ahead.of(s.name)) == 2
    other = _session(postgres_url, tmp_path, ahead=3, max_concurrent=2)
    got: list[Any] = []
    t = threading.Thread(
        target=lambda: got.append(Claims(other, SystemClock(), "w2", 30.0).claim())
    )
    with s.storage.session() as tx:
        s.storage.ahead._serialise(tx, s.name)
        s.storage.ahead._record(tx, s.name, 50, {"state": TrialState.RUNNING, "worker": "w3"})
        t.start()
        t.join(timeout=1.0)
        assert t.is_alive() and got == []  # waits for the take in flight
    t.join(timeout=20)
    assert got == [None]  # two run now: the sweep is full
    assert len(s.storage.ahead.of(s.name)) == 2
    s.storage.close()
    other.storage.close()


def test_one_connection_of_a_process_waits_for_the_takes_lock(
    postgres_url: str, tmp_path: Path
) -> None:
    """Many worker loops of one process take at once while another worker's take is in
    flight: they queue on a lock of the process, so one pooled connection waits for the
    database's advisory lock and the others stay free (a heartbeat needs one)."""
    s = _session(postgres_url, tmp_path, ahead=6)  # six made at the sweep's creation
    mine = Claims(s, SystemClock(), "w1", 30.0)
    assert mine.claim() is not None and len(s.storage.ahead.of(s.name)) == 5
    got: list[Any] = []

    def claim(worker: str) -> None:
        got.append(Claims(s, SystemClock(), worker, 30.0).claim())

    threads = [threading.Thread(target=claim, args=(f"t{i}",)) for i in range(5)]
    waiting = sa.text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock' AND wait_event = 'advisory'"
    )
    with s.storage.session() as tx:
        s.storage.ahead._serialise(tx, s.name)  # another worker's take in flight
        for t in threads:
            t.start()

        def waiting_now() -> int:  # a transaction of its own: pg_stat_activity is read afresh
            with s.storage.engine.connect() as conn:
                return int(conn.execute(waiting).scalar() or 0)

        deadline = time.monotonic() + 30  # until one waits (a busy machine starts late)
        while waiting_now() == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the others, had they not queued in the process, would by now
        assert waiting_now() == 1
        assert got == []
    for t in threads:
        t.join(timeout=20)
    assert sorted(c.trial_number for c in got) == [1, 2, 3, 4, 5]
    s.storage.close()


@pytest.mark.parametrize("ahead", [0, 3])
def test_concurrent_claims_on_postgresql_keep_every_limit(
    postgres_url: str, tmp_path: Path, ahead: int
) -> None:
    """Six workers claim and end trials at once; ``max_concurrent`` 3 is never exceeded, no
    trial goes to two workers, and the budget's 30 trials all run once."""
    limit, workers = 3, 6
    sessions = [
        _session(postgres_url, tmp_path, ahead=ahead, trials=30, max_concurrent=limit)
        for _ in range(workers)
    ]
    taken: list[tuple[str, int]] = []
    over: list[int] = []
    lock = threading.Lock()

    def work(i: int) -> None:
        s, me = sessions[i], f"w{i}"
        claims = Claims(s, SystemClock(), me, 30.0)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            got = claims.claim()
            if got is None:
                if s.scheduler.finished():
                    return
                time.sleep(0.01)
                continue
            running = s.storage.trials.running_elsewhere(s.name, None)
            with lock:
                taken.append((me, got.trial_number))
                if running > limit:
                    over.append(running)
            claims.refill()
            time.sleep(0.005)
            _end(s, got.trial_number)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=90)
    numbers = sorted(n for _, n in taken)
    assert numbers == list(range(30))  # each trial once, the whole budget
    assert over == []
    assert sessions[0].storage.ahead.of(sessions[0].name) == []
    assert len({w for w, _ in taken}) > 1  # the workers shared them
    for s in sessions:
        s.storage.close()


def test_a_simulated_sweep_with_suggestions_ahead_runs_each_trial_once(tmp_path: Path) -> None:
    sim = Sim(
        tmp_path, curve(lambda p, s: float(p["x"]) / s, steps=3),
        {"budget": {"trials": 9, "max_concurrent": 2, "ahead": 3}},
    )  # fmt: skip
    summary = sim.run(sim.controller())
    assert summary.state_counts["COMPLETE"] == 9
    assert sim.max_running <= 2
    assert sim.storage.ahead.of(sim.cfg.name) == []
    launches = Counter(lease.trial for lease in sim.storage.leases.all(sim.cfg.name))
    assert sorted(launches) == list(range(9)) and set(launches.values()) == {1}
