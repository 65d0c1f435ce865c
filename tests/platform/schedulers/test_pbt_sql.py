"""The SQL population store: same behaviour as in memory, safe under concurrent processes."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from hyperfleet.platform.schedulers.base import DecisionKind
from hyperfleet.platform.schedulers.pbt.population import MemoryPopulationStore
from hyperfleet.platform.schedulers.pbt.scheduler import PBTConfig, PBTScheduler
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.population import (
    LineageEvent,
    MemberState,
    SqlPopulationStore,
    replay_schedule,
)
from hyperfleet.platform.storage.schema import lineage_table
from tests.platform.schedulers.test_pbt import (
    TOY_INITIAL,
    TOY_SPACE,
    best_q,
    run_toy,
    toy_q,
    toy_scheduler,
    toy_step,
)


def _engine(path: Path) -> sa.Engine:
    """The platform's engine on a SQLite file, its schema created (as a sweep does)."""
    return Storage(f"sqlite:///{path}").engine


def test_sqlite_store_runs_the_toy_like_the_memory_store(tmp_path: Path) -> None:
    sql = SqlPopulationStore(_engine(tmp_path / "hf.db"))
    mem = MemoryPopulationStore()
    on_sql = run_toy(toy_scheduler(sql, max_steps=80))
    in_mem = run_toy(toy_scheduler(mem, max_steps=80))
    assert on_sql.final == in_mem.final  # same seed, same decisions
    assert [(e.member, e.kind, e.step, e.donor) for e in sql.lineage("toy")] == [
        (e.member, e.kind, e.step, e.donor) for e in mem.lineage("toy")
    ]
    best = max(on_sql.final, key=lambda n: toy_q(on_sql.final[n]))
    assert replay_schedule(sql, "toy", best) == replay_schedule(mem, "toy", best)
    assert best_q(on_sql) > 0.9
    with sql.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"


def test_a_rebuilt_scheduler_continues_where_the_first_left(tmp_path: Path) -> None:
    engine = _engine(tmp_path / "hf.db")
    first = toy_scheduler(SqlPopulationStore(engine), max_steps=40)
    a, b = first.suggest(), first.suggest()
    assert a is not None and b is not None
    for step in range(1, 5):
        first.report(a.trial_number, step, {"Q": 0.1})
        first.report(b.trial_number, step, {"Q": 0.2})
    again = toy_scheduler(SqlPopulationStore(_engine(tmp_path / "hf.db")), max_steps=40)
    d = again.decide(a.trial_number, 4)  # another process, another object: same state
    assert d.kind == DecisionKind.EXPLOIT and d.donor == b.trial_number
    assert first.decide(a.trial_number, 4) == d
    assert first.members() == again.members()


def test_lineage_key_is_unique_in_the_database(tmp_path: Path) -> None:
    store = SqlPopulationStore(_engine(tmp_path / "hf.db"))
    event = LineageEvent("s", 1, 1, "exploit", 4, 0, 4, {"a": 1}, {"a": 2}, 0.1, 0.2, time=1.0)
    with store.transaction("s") as txn:
        assert txn.add_lineage(event)
        assert not txn.add_lineage(event)
    values = {k: v for k, v in event.__dict__.items() if k != "seq"}
    with pytest.raises(sa.exc.IntegrityError), store.engine.begin() as conn:
        conn.execute(lineage_table.insert().values(**values))
    assert len(store.lineage("s")) == 1


# --------------------------------------------------------------------------- two processes


def _scheduler(db: str) -> PBTScheduler:
    return PBTScheduler(
        PBTConfig(type="pbt", population=4, perturbation_interval=4, seed=3, initial=TOY_INITIAL),
        store=SqlPopulationStore(_engine(Path(db))),
        sweep="toy",
        space=TOY_SPACE,
        metric="Q",
        mode="max",
        max_steps=32,
    )


def _save(ckpt: Path, member: int, step: int, theta: Any) -> None:
    tmp = ckpt / f".{member}-{step}.tmp"
    tmp.write_text(json.dumps(list(theta)))
    os.replace(tmp, ckpt / f"{member}-{step}.json")


def _drive(db: str, ckpt_dir: str, numbers: list[int], out: str) -> None:
    """One process running some members step by step, retrying every report and decide."""
    sched, ckpt = _scheduler(db), Path(ckpt_dir)
    members = sched.members()
    run = {n: [(0.9, 0.9), 0, dict(members[n].params)] for n in numbers}
    exploits = []
    while run:
        for n in list(run):
            theta, step, params = run[n]
            theta, step = toy_step(theta, params), step + 1
            _save(ckpt, n, step, theta)
            sched.report(n, step, {"Q": toy_q(theta)})
            d = sched.decide(n, step)
            sched.report(n, step, {"Q": toy_q(theta)})  # a retry changes nothing
            assert sched.decide(n, step) == d
            if d.kind == DecisionKind.EXPLOIT:
                exploits.append([n, step, d.donor, d.donor_step])
                theta = tuple(json.loads((ckpt / f"{d.donor}-{d.donor_step}.json").read_text()))
                step, params = d.donor_step, dict(d.params)
                _save(ckpt, n, step, theta)
            if step >= sched.max_steps:
                del run[n]
            else:
                run[n] = [theta, step, params]
    Path(out).write_text(json.dumps(exploits))


def test_two_processes_report_and_decide_concurrently(tmp_path: Path) -> None:
    db = str(tmp_path / "hf.db")
    sched = _scheduler(db)
    assert [sched.suggest().trial_number for _ in range(4)] == [0, 1, 2, 3]
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=_drive, args=(db, str(tmp_path), nums, str(tmp_path / f"out{i}")))
        for i, nums in enumerate([[0, 2], [1, 3]])
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    exploits = [e for i in range(2) for e in json.loads((tmp_path / f"out{i}").read_text())]
    assert exploits, "no exploit happened"
    events = sched.store.lineage("toy")
    keys = [(e.member, e.generation, e.kind) for e in events]
    assert len(keys) == len(set(keys)) == 2 * len(exploits)
    got = sorted([e.member, e.step, e.donor, e.donor_step] for e in events if e.kind == "exploit")
    assert got == sorted(exploits)
    members = sched.members()
    assert all(m.step == 32 and m.state == MemberState.RUNNING for m in members.values())


def _reports_under_a_held_population_lock(url: str, sched: PBTScheduler) -> tuple[bool, bool]:
    """Member 0 reports step 1 (no ready check), then step 4 (a ready check) while another
    session holds ``sched``'s population lock: whether each went through before it let go."""
    import threading

    from hyperfleet.platform.storage.schema import populations_table

    assert [sched.suggest().trial_number for _ in range(2)] == [0, 1]
    done: dict[int, Any] = {}

    def report(step: int) -> None:
        done[step] = sched.report_decide_and_pin(0, step, {"Q": 0.1})

    t = populations_table
    holder = sa.create_engine(url, pool_size=1)
    with holder.begin() as conn:  # the population's lock, held until this block ends
        conn.execute(t.update().where(t.c.sweep == sched.sweep).values(version=t.c.version + 1))
        went = []
        for step in (1, 4):  # perturbation_interval: 4
            th = threading.Thread(target=report, args=(step,))
            th.start()
            th.join(5 if step == 1 else 1)
            went.append(step in done)
    th.join(10)
    holder.dispose()
    m = sched.members()[0]
    assert (m.step, m.reports, m.last_check) == (4, 2, 4)
    return went[0], went[1]


def test_only_exclusive_decisions_wait_for_the_population(postgres_url: str) -> None:
    """On PostgreSQL a report between ready checks locks its member's row alone; so does an
    asynchronous ready check without time-sharing (its own row and its donor's): neither
    waits while another session holds the population's lock. A synchronous one does."""
    store = SqlPopulationStore(Storage(postgres_url).engine)
    assert _reports_under_a_held_population_lock(postgres_url, toy_scheduler(store)) == (
        True,
        True,
    )
    sync = PBTScheduler(
        PBTConfig(type="pbt", population=2, perturbation_interval=4, seed=0, synchronous=True),
        store=store, sweep="toy-sync", space=TOY_SPACE, metric="Q", mode="max", max_steps=200,
    )  # fmt: skip
    assert _reports_under_a_held_population_lock(postgres_url, sync) == (True, False)


def test_a_decision_never_writes_over_a_report_it_did_not_read(postgres_url: str) -> None:
    """A population transaction reads members without locking them: a report committed after
    that read makes writing the stale member a conflict (decided again), and ``fresh`` reads
    and holds the member as it is now."""
    from hyperfleet.platform.storage.population import PopulationConflictError

    store = SqlPopulationStore(Storage(postgres_url).engine)
    sched = toy_scheduler(store)
    assert [sched.suggest().trial_number for _ in range(2)] == [0, 1]
    with pytest.raises(PopulationConflictError), store.transaction("toy") as txn:
        read = txn.members()
        sched.report(1, 1, {"Q": 0.5})  # a member's own transaction, committed meanwhile
        assert txn.fresh(0) == read[0]  # unchanged, and now held
        txn.put(read[0])  # no conflict
        txn.put(read[1])  # stale: the report came after the read
    assert sched.members()[1].step == 1  # the report stands
    with store.transaction("toy") as txn:
        txn.members()
        sched.report(1, 2, {"Q": 0.6})
        now_1 = txn.fresh(1)
        assert now_1 is not None and now_1.step == 2
        txn.put(now_1)  # held since fresh: no conflict


def test_two_decisions_that_deadlock_are_made_again(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two asynchronous decisions each hold their own member and want the other's (each the
    other's donor): PostgreSQL ends one with a deadlock, which is a ``PopulationConflictError``,
    and the scheduler makes that decision again from a new read; both commit."""
    import threading

    store = SqlPopulationStore(Storage(postgres_url).engine)
    sched = toy_scheduler(store)
    assert [sched.suggest().trial_number for _ in range(2)] == [0, 1]
    caplog.set_level("DEBUG", logger="hyperfleet.platform.schedulers.pbt")
    both_hold = threading.Barrier(2, timeout=30)
    runs: dict[int, int] = {0: 0, 1: 0}
    results: dict[int, int] = {}
    errors: list[BaseException] = []

    def decide(own: int) -> None:
        other = 1 - own

        def body(txn: Any) -> int:
            runs[own] += 1
            mine = txn.fresh(own)  # held to commit
            if runs[own] == 1:
                both_hold.wait()  # each holds its own row, then asks for the other's
            txn.fresh(other)
            txn.put(mine)
            return own

        try:
            results[own] = sched._in_population(body, alone=True)
        except Exception as exc:  # noqa: BLE001 -- a thread's failure, asserted below
            errors.append(exc)

    threads = [threading.Thread(target=decide, args=(n,)) for n in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert results == {0: 0, 1: 1}, "both decisions committed"
    # the victim was made again (a retry may deadlock once more: the survivor's wait for the
    # victim's row can lose the race to the victim's new transaction)
    assert max(runs.values()) >= 2, runs
    assert "deadlock detected" in caplog.text
