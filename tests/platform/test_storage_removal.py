"""``storage.removal``: every ``hf_*`` table that names a sweep is emptied of that sweep's rows
(and no other sweep's), its Optuna study is deleted, and a removal cut short is finished by
the next; who serves a sweep is read from live heartbeats, never from stale ones. On SQLite and
PostgreSQL (whose foreign key from ``hf_trials`` to ``hf_sweeps`` holds the order)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import optuna
import pytest
import sqlalchemy as sa

from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.records import WorkerRecord
from hyperfleet.platform.storage.removal import SWEEP_TABLES
from hyperfleet.platform.storage.schema import metadata
from hyperfleet.spec.states import TrialState, WorkerState

NAMES = ("gone", "stays")


@pytest.fixture
def storage(db_url: str) -> Iterator[Storage]:
    """A storage on each backend (SQLite and PostgreSQL: ``db_url``)."""
    st = Storage(db_url)
    try:
        yield st
    finally:
        st.close()


def _naming(table: sa.Table) -> str | None:
    """The column of ``table`` that names a sweep, if it has one."""
    if table.name == "hf_sweeps":
        return "name"
    return "sweep" if "sweep" in table.c else None


def _filler(column: sa.Column[Any]) -> Any:
    """A value of the column's type for a row that only has to exist."""
    kind = column.type
    if isinstance(kind, sa.Boolean):
        return False
    if isinstance(kind, sa.Integer):
        return 1
    if isinstance(kind, sa.Float):
        return 0.0
    if isinstance(kind, sa.JSON):
        return {}
    return "x"


def _fill(st: Storage, name: str) -> None:
    """The sweep's row, its Optuna study and a row in every other table that names a sweep."""
    st.sweeps.create(name, {})
    optuna.create_study(study_name=name, storage=st.optuna).ask()
    with st.engine.begin() as conn:
        for table in metadata.sorted_tables:
            column = _naming(table)
            if column is None or table.name == "hf_sweeps":
                continue
            row = {c.name: _filler(c) for c in table.c if not (c.primary_key and c.autoincrement
                   is True)}  # fmt: skip
            conn.execute(table.insert().values({**row, column: name}))


def _counts(st: Storage, name: str) -> dict[str, int]:
    counts = {}
    with st.engine.connect() as conn:
        for table in metadata.sorted_tables:
            column = _naming(table)
            if column is not None:
                q = sa.select(sa.func.count()).where(table.c[column] == name)
                counts[table.name] = int(conn.scalar(q) or 0)
    return counts


def test_every_table_naming_a_sweep_is_removed_from() -> None:
    naming = {t.name for t in metadata.sorted_tables if _naming(t) is not None}
    assert {t.name for t, _ in SWEEP_TABLES} == naming, "a table naming sweeps is not removed from"
    assert SWEEP_TABLES[-1][0].name == "hf_sweeps"  # the sweep's own row last


def test_remove_takes_one_sweep_whole_and_leaves_the_others(storage: Storage) -> None:
    for name in NAMES:
        _fill(storage, name)
    assert set(_counts(storage, "gone").values()) == {1}
    removed = storage.removal.remove("gone")
    assert removed.study and set(removed.rows.values()) == {1}
    assert set(_counts(storage, "gone").values()) == {0}
    assert set(_counts(storage, "stays").values()) == {1}
    assert optuna.get_all_study_names(storage.optuna) == ["stays"]
    assert storage.sweeps.get("gone") is None and storage.sweeps.get("stays") is not None
    # removing again finds nothing, and is no error (a removal cut short is finished so)
    again = storage.removal.remove("gone")
    assert not again.study and set(again.rows.values()) == {0}


def test_a_study_already_gone_does_not_stop_the_rows(storage: Storage) -> None:
    _fill(storage, "gone")
    optuna.delete_study(study_name="gone", storage=storage.optuna)
    removed = storage.removal.remove("gone")
    assert not removed.study and removed.rows["hf_sweeps"] == 1


def _running(st: Storage, number: int, heartbeat: float, worker: str | None = None) -> None:
    st.trials.upsert("gone", number, state=TrialState.RUNNING, heartbeat_at=heartbeat,
                    worker=worker, host="host-a")  # fmt: skip


def _worker(st: Storage, wid: str, sweeps: list[str] | None, heartbeat: float) -> None:
    st.workers.register(WorkerRecord(wid, "host-b", 7, "default", ["cpu:0"], None, sweeps,
                                     heartbeat, heartbeat, WorkerState.ACTIVE))  # fmt: skip


def test_serving_counts_live_heartbeats_only(storage: Storage) -> None:
    storage.sweeps.create("gone", {})
    now = time.time()
    _running(storage, 0, now - 600)  # its worker went silent ten minutes ago
    _worker(storage, "any", None, now)  # serves every sweep: not this one in particular
    _worker(storage, "old", ["gone"], now - 600)  # a `sweep run` of it that died
    assert not storage.removal.serving("gone", stale_after=60)
    _running(storage, 1, now, worker="w1")
    serving = storage.removal.serving("gone", stale_after=60)
    assert serving.trials == ((1, "w1", "host-a"),)
    assert "1 trial running (trial 1 on host-a)" in serving.describe()


def test_a_live_worker_started_for_the_sweep_serves_it(storage: Storage) -> None:
    storage.sweeps.create("gone", {})
    _worker(storage, "mine", ["gone", "other"], time.time())
    serving = storage.removal.serving("gone", stale_after=60)
    assert serving and serving.workers == (("mine", "host-b", 7),)
    assert "worker mine on host-b" in serving.describe()
    assert not storage.removal.serving("other-sweep", stale_after=60)
