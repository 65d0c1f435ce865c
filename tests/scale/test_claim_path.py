"""The claim's round trips: a suggestion's parameters written in one transaction (Optuna's
checks kept), no ping before each checkout (a dropped connection is retried instead), a pool
with no connection free waited out, and a heartbeat in two statements."""

from __future__ import annotations

import optuna
import pytest
import sqlalchemy as sa
from optuna.distributions import FloatDistribution
from optuna.exceptions import UpdateFinishedTrialError

from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.controller import open_session
from hyperfleet.platform.schedulers.optuna import internals
from hyperfleet.platform.schedulers.optuna.internals import state_counts, write_params
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.retry import retrying
from hyperfleet.platform.storage.schema import TrialRow
from hyperfleet.platform.tracking import NullTracker
from hyperfleet.spec.states import TrialState
from hyperfleet.testing.sweeps import minimal_sweep

SPACE = {
    "x": {"type": "float", "low": 0.0, "high": 1.0},
    "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
    "n": {"type": "int", "low": 1, "high": 8},
}


KILL_OTHERS = sa.text(
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
)


def _session(url: str, tmp_path) -> tuple[Storage, object]:  # type: ignore[no-untyped-def]
    # none made at creation (budget.ahead 0): the tests make the suggestions they look at
    data = minimal_sweep(name="claims", space=SPACE, scheduler={"type": "random", "seed": 0},
                         storage=url, workdir=str(tmp_path), budget={"ahead": 0})  # fmt: skip
    storage = Storage(url)
    return storage, open_session(parse_sweep(data), storage, NullTracker(), None)


@pytest.mark.postgres
def test_a_suggestions_params_are_one_insert_in_one_transaction(
    postgres_url, tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    storage, session = _session(postgres_url, tmp_path)
    reads: list[int] = []
    cache = internals.LeanCachedStorage
    read = cache._read_trials_from_remote_storage
    monkeypatch.setattr(
        cache, "_read_trials_from_remote_storage", lambda self, i: (reads.append(i), read(self, i))
    )
    seen: list[str] = []
    engine = storage.optuna.engine

    def record(_c, _cur, statement, *_a) -> None:  # type: ignore[no-untyped-def]
        seen.append(statement.split()[0] + " " + " ".join(statement.split()[1:3]))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        first = session.scheduler.suggest()  # type: ignore[attr-defined]
        second = session.scheduler.suggest()  # type: ignore[attr-defined]
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    inserts = [s for s in seen if s.startswith("INSERT INTO trial_params")]
    assert len(inserts) == 2  # one per suggestion, however many dimensions
    assert reads == []  # the history was never read: a random claim needs none of it
    study = optuna.load_study(study_name="claims", storage=storage.optuna)
    assert state_counts(study) == {optuna.trial.TrialState.RUNNING: 2}
    for suggestion in (first, second):
        stored = study.trials[suggestion.trial_number].params
        assert stored == suggestion.params and set(stored) == set(SPACE)
        assert 0.0 <= stored["x"] <= 1.0 and 1 <= stored["n"] <= 8
    storage.close()


@pytest.mark.postgres
def test_batched_params_keep_optunas_refusals(postgres_url, tmp_path) -> None:  # type: ignore[no-untyped-def]
    storage, session = _session(postgres_url, tmp_path)
    study = session.scheduler.study  # type: ignore[attr-defined]
    done = session.scheduler.suggest()  # type: ignore[attr-defined]
    study.tell(done.trial_number, 0.5)
    trial_id = study.trials[done.trial_number]._trial_id
    with pytest.raises(UpdateFinishedTrialError):
        write_params(study._storage, trial_id, [("y", 0.1, FloatDistribution(0.0, 1.0))])
    live = study.ask()
    with pytest.raises(ValueError):  # x was a float on a linear scale
        write_params(
            study._storage, live._trial_id, [("x", 0.1, FloatDistribution(0.1, 1, log=True))]
        )
    assert study.trials[live.number].params == {}  # nothing written
    storage.close()


@pytest.mark.postgres
def test_a_dropped_connection_is_retried_without_a_ping(postgres_url, tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    """A pooled connection the server ended is replaced at once, as a ping would have: no
    wait and no "unreachable" warning (those are for a server that stays away)."""
    storage, _ = _session(postgres_url, tmp_path)
    reader = Storage(postgres_url, create=False, readonly=True)
    assert not storage.engine.pool._pre_ping and not storage.optuna.engine.pool._pre_ping
    assert reader.engine.pool._pre_ping  # readers are not retried: they still ping
    storage.trials.upsert("claims", 0, state=TrialState.RUNNING, worker="w", heartbeat_at=1.0)
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:  # the server drops every pooled connection
        conn.execute(KILL_OTHERS)
    admin.dispose()
    slept: list[float] = []
    with caplog.at_level("WARNING", logger="hyperfleet.platform.storage.retry"):
        found = retrying(
            lambda: storage.trials.running_elsewhere("claims", None), 30, sleep=slept.append
        )
    assert found == 1 and slept == [] and "unreachable" not in caplog.text
    assert storage.workers.beat("w") == {("claims", 0)}  # retried by the storage itself
    reader.close()
    storage.close()


def test_a_pool_with_no_free_connection_is_waited_out(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A storage call that finds every pooled connection in use past the pool's timeout is
    tried again, as an outage is, instead of stopping the worker's loop."""
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'db'}", poolclass=sa.pool.QueuePool,
                              pool_size=1, max_overflow=0, pool_timeout=0.1)  # fmt: skip
    held = engine.connect()  # another thread's transaction, in effect
    slept: list[float] = []

    def release(seconds: float) -> None:
        slept.append(seconds)
        held.close()

    def read() -> int:
        with engine.connect() as conn:
            return int(conn.execute(sa.text("SELECT 1")).scalar_one())

    assert retrying(read, 30, sleep=release) == 1
    assert slept == [0.5]
    engine.dispose()


def test_a_heartbeat_stamps_the_worker_and_its_running_trials_only(tmp_path) -> None:  # type: ignore[no-untyped-def]
    storage, _ = _session(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path / "runs")
    storage.trials.upsert("claims", 0, state=TrialState.RUNNING, worker="w", heartbeat_at=1.0)
    storage.trials.upsert("claims", 1, state=TrialState.COMPLETE, worker="w", heartbeat_at=1.0)
    storage.trials.upsert("claims", 2, state=TrialState.RUNNING, worker="v", heartbeat_at=1.0)
    assert storage.workers.beat("w") == {("claims", 0)}
    with storage.session() as s:
        stamps = dict(s.execute(sa.select(TrialRow.number, TrialRow.heartbeat_at)).all())
    assert stamps[0] > 1.0 and stamps[1] == 1.0 and stamps[2] == 1.0
    storage.close()


def test_an_idle_worker_waits_for_its_next_ask_not_a_tenth_of_a_second(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from hyperfleet.platform.launcher.simulated import curve
    from hyperfleet.testing.controller import Sim

    sim = Sim(tmp_path, curve(lambda p, s: 1.0 / s, steps=2))
    c = sim.controller(poll_every=0.1, ask_every=2.0)
    assert c._idle_pause() == 1.0  # no sweep yet: half of ask_every
    c._rescan()
    (d,) = c.drivers.values()
    assert c._idle_pause() == 0.1  # it may ask now: the next tick
    now = sim.clock.monotonic()
    d._next_ask = now + 2.0  # its scheduler had nothing
    assert c._idle_pause() == 1.0
    d._next_ask = now + 0.4
    assert abs(c._idle_pause() - 0.4) < 1e-9


def test_a_worker_of_simulated_trials_sleeps_until_their_next_report_or_end(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A thousand worker loops of simulated trials must not each tick ten times a second: the
    simulated launcher says when its trials next report or end, and the loop sleeps until
    then (at most ``ask_every / 2`` with every device busy). A real launcher cannot tell."""
    from hyperfleet.platform.launcher.base import Launcher
    from hyperfleet.platform.launcher.simulated import curve
    from hyperfleet.testing.controller import Sim

    script = curve(lambda p, s: 1.0 / s, steps=2, seconds_per_step=30.0)
    sim = Sim(tmp_path, script, {"budget": {"trials": 2, "max_concurrent": 2}})
    c = sim.controller(poll_every=0.1, ask_every=2.0)
    waits: list[float] = []
    wait = sim.clock.wait
    sim.clock.wait = lambda stop, s: (waits.append(s), wait(stop, s))[1]  # type: ignore[method-assign]
    summary = sim.run(c)
    assert summary.state_counts["COMPLETE"] == 2
    busy = [w for w in waits if w > 0.1]
    assert busy and max(busy) <= 1.0  # every device busy: it sleeps, up to ask_every / 2
    assert len(waits) < 150  # 60 s of trials at poll_every would be 600 ticks
    assert sim.launcher.next_event_in() == float("inf")  # nothing runs: no event to come
    assert Launcher.next_event_in(sim.launcher) is None  # the default: real processes poll
