"""Indexes that keep the per-trial reads of a long sweep from growing with its history."""

from __future__ import annotations

import sqlalchemy as sa

from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.schema import ADDED_INDEXES, TrialRow
from hyperfleet.spec.states import TrialState


def _indexes(engine: sa.Engine) -> set[str]:
    return {str(ix["name"]) for ix in sa.inspect(engine).get_indexes("hf_trials")}


def test_an_older_database_gets_the_indexes_and_counts_by_them(db_url: str) -> None:
    st = Storage(db_url)
    assert set(ADDED_INDEXES) <= _indexes(st.engine)
    with st.engine.begin() as conn:  # a database made before the indexes
        for name in ADDED_INDEXES:
            conn.execute(sa.text(f"DROP INDEX {name}"))
    st.close()
    assert not set(ADDED_INDEXES) & _indexes(st.engine)
    Storage(db_url).close()  # a writer opens it: the indexes are made, twice is no error
    st = Storage(db_url)
    assert set(ADDED_INDEXES) <= _indexes(st.engine)
    count = sa.select(sa.func.count()).where(
        TrialRow.sweep == "s", TrialRow.state == TrialState.RUNNING
    )
    with st.engine.connect() as conn:
        sql = str(count.compile(conn, compile_kwargs={"literal_binds": True}))
        if conn.dialect.name == "sqlite":
            rows = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}")
            plan = " ".join(str(r[-1]) for r in rows)
        else:  # a small table is scanned whatever its indexes: ask for the indexed plan
            conn.exec_driver_sql("SET enable_seqscan = off")
            plan = " ".join(str(r[0]) for r in conn.exec_driver_sql(f"EXPLAIN {sql}"))
    assert "ix_hf_trials_sweep_state" in plan, plan
    st.close()
