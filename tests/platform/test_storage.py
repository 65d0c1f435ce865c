"""Storage conformance: the same behaviour on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
from pathlib import Path

import optuna
import pytest

from hyperfleet.platform.storage import Storage, TrialRecord, worker_identity
from hyperfleet.platform.storage.records import TRIAL_FIELDS
from hyperfleet.spec.states import TrialState


def test_a_write_may_set_every_field_of_a_trial_record_but_its_key() -> None:
    """``TrialFields`` (what a write may set) and ``TrialRecord`` (what a read returns) list
    the same fields of a ``hf_trials`` row, in their own order."""
    read = {f.name for f in dataclasses.fields(TrialRecord)}
    assert read - {"sweep", "number"} == TRIAL_FIELDS


def test_sweep_and_trial_rows_round_trip(db_url: str) -> None:
    st = Storage(db_url)
    st.sweeps.create("s", {"name": "s", "space": {"x": 1}})
    assert st.sweeps.get("s").stored_config["space"] == {"x": 1}
    assert st.sweeps.get("s").config is None  # not a sweep file's config: kept as stored only
    st.sweeps.update("s", mlflow_experiment_id="7", status="running")
    assert st.sweeps.get("s").mlflow_experiment_id == "7"
    assert [r.name for r in st.sweeps.all()] == ["s"]
    st.trials.upsert("s", 0, state="RUNNING", params={"lr": 0.1}, attempts=1)
    st.trials.record_report("s", 0, 50, {"val": 0.5})
    t = st.trials.get("s", 0)
    assert (t.state, t.last_step, t.metrics, t.params) == ("RUNNING", 50, {"val": 0.5}, {"lr": 0.1})
    assert st.trials.get("s", 1) is None
    st.close()


@pytest.mark.postgres
def test_a_sweep_write_of_what_its_row_holds_takes_no_row_lock(postgres_url: str) -> None:
    """Every worker of a fleet writes the same status as it opens and closes a sweep: a
    worker that finds it written leaves the row alone, without queueing for its lock; a
    change still waits for the lock and is made."""
    import threading

    import sqlalchemy as sa

    from hyperfleet.spec.states import SweepStatus

    st = Storage(postgres_url)
    st.sweeps.create("s", {})
    st.sweeps.update("s", status=SweepStatus.DONE, mlflow_experiment_id="7")
    written = st.sweeps.get("s").updated_at
    holder = sa.create_engine(postgres_url)
    done: list[str] = []
    with holder.connect() as conn:  # another session holds the sweep's row lock
        conn.execute(sa.text("SELECT 1 FROM hf_sweeps WHERE name = 's' FOR UPDATE"))
        same = threading.Thread(target=lambda: (st.sweeps.update("s", status="done"),
                                                done.append("same")))  # fmt: skip
        same.start()
        same.join(timeout=10)
        assert done == ["same"]  # not behind the lock
        assert st.sweeps.get("s").updated_at == written  # and nothing written
        other = threading.Thread(target=lambda: (st.sweeps.update("s", status="running"),
                                                 done.append("other")))  # fmt: skip
        other.start()
        other.join(timeout=1.0)
        assert done == ["same"]  # a change waits for the holder
        conn.rollback()
    other.join(timeout=10)
    assert done == ["same", "other"]
    row = st.sweeps.get("s")
    assert row.status == "running" and row.mlflow_experiment_id == "7"
    assert row.updated_at > written
    holder.dispose()
    st.close()


def _dead_pid() -> int:
    """The pid of a process of this host that has ended."""
    proc = mp.get_context("spawn").Process(target=os.getpid)
    proc.start()
    proc.join()
    assert proc.pid is not None
    return proc.pid


def test_stale_running_finds_dead_worker(db_url: str) -> None:
    st = Storage(db_url)
    st.sweeps.create("s", {})
    host, pid = worker_identity()
    st.trials.upsert("s", 0, state="RUNNING", host=host, pid=_dead_pid(), heartbeat_at=1e18)
    st.trials.upsert("s", 1, state="RUNNING", host=host, pid=pid, heartbeat_at=1e18)
    st.trials.upsert("s", 2, state="RUNNING", host="elsewhere", pid=1, heartbeat_at=0.0)
    assert sorted(t.number for t in st.stale.running("s", 120.0)) == [0, 2]
    st.close()


def _report_many(url: str, number: int, n: int) -> None:
    st = Storage(url)
    for step in range(n):
        st.trials.record_report("s", number, step, {"v": float(step)})
    st.close()


def _create(url: str, start: object) -> None:
    start.wait()  # type: ignore[attr-defined]
    Storage(url).close()


def test_processes_creating_one_new_database_at_once_all_succeed(db_url: str) -> None:
    """Racing first starts (two ``sweep run`` of a new sweep): each creates the schema it finds
    missing; one losing a race on a table (\"already exists\") goes on, not fails."""
    ctx = mp.get_context("fork")
    start = ctx.Event()
    procs = [ctx.Process(target=_create, args=(db_url, start)) for _ in range(6)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * 6
    st = Storage(db_url, create=False)
    st.sweeps.create("s", {})
    assert st.sweeps.get("s") is not None
    st.close()


def test_concurrent_writers_do_not_lock_each_other_out(db_url: str) -> None:
    st = Storage(db_url)
    st.sweeps.create("s", {})
    for n in range(3):
        st.trials.upsert("s", n, state="RUNNING")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_report_many, args=(db_url, n, 30)) for n in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert [t.last_step for t in st.trials.of("s")] == [29, 29, 29]
    st.close()


def test_optuna_study_lives_in_the_same_database(db_url: str) -> None:
    st = Storage(db_url)
    study = optuna.create_study(storage=st.optuna, study_name="s", direction="maximize")
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
    again = optuna.load_study(study_name="s", storage=Storage(db_url).optuna)
    assert len(again.trials) == 3
    st.close()


def test_bad_url_is_a_storage_error(tmp_path) -> None:
    from hyperfleet.errors import StorageError

    with pytest.raises(StorageError, match="not a database URL"):
        Storage("not a url")


# -- one schema, read-only readers -----------------------------------------------------------


def test_one_schema_holds_every_hf_table_with_a_version(db_url: str) -> None:
    import sqlalchemy as sa

    from hyperfleet.platform.storage import SCHEMA_VERSION
    from hyperfleet.platform.storage.schema import metadata, schema_version

    st = Storage(db_url)
    tables = {t for t in sa.inspect(st.engine).get_table_names() if t.startswith("hf_")}
    assert tables == {t for t in metadata.tables if t.startswith("hf_")}
    assert {"hf_sweeps", "hf_trials", "hf_pbt_members", "hf_lineage", "hf_meta"} <= tables
    with st.engine.connect() as conn:
        assert schema_version(conn) == SCHEMA_VERSION
    Storage(db_url).close()  # opening again is idempotent
    st.close()


def test_a_newer_schema_is_refused_with_one_line(db_url: str) -> None:
    import sqlalchemy as sa

    from hyperfleet.errors import StorageError
    from hyperfleet.platform.storage.schema import meta_table

    st = Storage(db_url)
    with st.engine.begin() as conn:
        conn.execute(sa.update(meta_table).values(value="99"))
    st.close()
    for opener in (Storage, Storage.open_readonly):
        with pytest.raises(StorageError, match="schema version 99, newer") as err:
            opener(db_url)
        assert "\n" not in str(err.value)


def test_a_version_2_database_is_read_as_it_is_and_upgraded_in_place(db_url: str) -> None:
    import sqlalchemy as sa

    from hyperfleet.platform.storage import SCHEMA_VERSION
    from hyperfleet.platform.storage.schema import meta_table, schema_version

    st = Storage(db_url)  # made as version 2 was: hf_leases without the share columns
    st.leases.open("s", 0, ["cuda:0"], "w1")
    st.sweeps.create("s", {})
    st.trials.upsert("s", 0, state=TrialState.RUNNING, last_step=3)
    with st.engine.begin() as conn:
        for column in ("share", "per_device"):
            conn.execute(sa.text(f"ALTER TABLE hf_leases DROP COLUMN {column}"))
        conn.execute(sa.text("ALTER TABLE hf_trials DROP COLUMN sizes"))  # version 5's
        conn.execute(sa.text("DROP TABLE hf_ahead"))  # version 4's table
        conn.execute(sa.update(meta_table).values(value="2"))
    st.close()

    reader = Storage.open_readonly(db_url)
    (old,) = reader.leases.all("s")
    assert (old.devices, old.share, old.per_device) == (["cuda:0"], 0, 1)
    trial = reader.trials.get("s", 0)
    assert trial is not None and trial.last_step == 3 and trial.sizes is None
    reader.close()

    st = Storage(db_url)  # a writer opens it: the newest version, columns added, rows kept
    with st.engine.connect() as conn:
        assert schema_version(conn) == SCHEMA_VERSION == 5
        assert sa.inspect(conn).has_table("hf_ahead")
    st.trials.record_size("s", 0, 4, 2)
    trial = st.trials.get("s", 0)
    assert trial is not None and trial.sizes == [[4, 2]] and trial.last_step == 3
    st.leases.open("s", 1, ["cuda:0"], "w1", share=2, per_device=4)
    assert [(x.trial, x.share, x.per_device) for x in st.leases.all("s")] == [(0, 0, 1), (1, 2, 4)]
    Storage(db_url).close()  # opening again changes nothing
    st.close()


def test_a_storage_opened_before_the_tables_reads_them_once_they_exist(db_url: str) -> None:
    """A reader opened on a database its sweep has not written to yet (a test or a script
    waiting for the first trial) sees the trials once a writer made the tables: what it found
    missing is asked again, not kept."""
    if db_url.startswith("sqlite"):
        Path(db_url.removeprefix("sqlite:///")).touch()
    early = Storage(db_url, create=False)
    assert early.trials.of("s") == [] and early.trials.get("s", 0) is None
    writer = Storage(db_url)
    writer.sweeps.create("s", {"space": {}})
    writer.trials.upsert("s", 0, state="RUNNING", params={"lr": 0.1})
    writer.trials.record_report("s", 0, 3, {"val": 0.5})
    assert [(t.number, t.last_step) for t in early.trials.of("s")] == [(0, 3)]
    assert early.trials.get("s", 0).last_step == 3
    early.close()
    writer.close()


def test_readonly_storage_creates_nothing(tmp_path: Path) -> None:
    from hyperfleet.errors import StorageError

    missing = tmp_path / "typo" / "hf.db"
    with pytest.raises(StorageError, match=r"no database at .*nothing was created"):
        Storage.open_readonly(f"sqlite:///{missing}")
    assert not (tmp_path / "typo").exists()


def test_readonly_storage_reads_and_cannot_write(db_url: str) -> None:
    import sqlalchemy as sa

    st = Storage(db_url)
    st.sweeps.create("s", {"space": {}})
    st.trials.upsert("s", 0, state="COMPLETE", metrics={"acc": 1.0})
    optuna.create_study(study_name="s", storage=st.optuna)
    st.close()
    ro = Storage.open_readonly(db_url)
    assert [r.name for r in ro.sweeps.all()] == ["s"]
    assert ro.trials.get("s", 0).metrics == {"acc": 1.0}
    assert optuna.load_study(study_name="s", storage=ro.optuna).study_name == "s"
    with pytest.raises(sa.exc.DBAPIError):
        ro.trials.upsert("s", 1, state="RUNNING")
    ro.close()


def test_readonly_storage_refuses_a_database_without_sweeps(db_url: str) -> None:
    from hyperfleet.errors import StorageError

    if db_url.startswith("sqlite"):
        Path(db_url.removeprefix("sqlite:///")).touch()
    with pytest.raises(StorageError, match="holds no hyperfleet sweeps"):
        Storage.open_readonly(db_url)


def test_a_sweep_record_carries_its_config_parsed(tmp_path: Path) -> None:
    from hyperfleet.platform.config import SweepConfig
    from tests.conftest import BASE_SWEEP

    cfg = SweepConfig.model_validate({**BASE_SWEEP, "name": "typed"})
    st = Storage(f"sqlite:///{tmp_path / 'hf.db'}")
    st.sweeps.create("typed", cfg.model_dump(mode="json"))
    row = st.sweeps.get("typed")
    assert row is not None and row.config == cfg and row.parsed() is row.config
    assert row.stored_config == cfg.model_dump(mode="json") and row.status == "created"
    st.close()


def test_writes_refuse_fields_a_row_does_not_have(tmp_path: Path) -> None:
    st = Storage(f"sqlite:///{tmp_path / 'hf.db'}")
    st.sweeps.create("s", {})
    with pytest.raises(TypeError, match="colour"):
        st.trials.upsert("s", 0, colour="red")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="colour"):
        st.sweeps.update("s", colour="red")  # type: ignore[call-arg]
    assert st.trials.get("s", 0) is None
    st.close()


def test_live_processes_of_this_host_are_not_read_as_candidates(db_url: str) -> None:
    """Several workers on one host: a look for stale trials reads the other processes' pids,
    not every trial they run (with 1,000 workers on one host that read was most of the CPU)."""
    st = Storage(db_url)
    st.sweeps.create("s", {})
    host, _ = worker_identity()
    dead = _dead_pid()
    parent = os.getppid()  # alive: another process of this host
    now = st.now()
    for n in range(20):
        st.trials.upsert("s", n, state="RUNNING", host=host, pid=parent, heartbeat_at=now)
    st.trials.upsert("s", 20, state="RUNNING", host=host, pid=dead, heartbeat_at=now)
    st.trials.upsert("s", 21, state="RUNNING", host=host, pid=parent, heartbeat_at=now - 100)
    assert [t.number for t in st.stale.candidates("s", host, now - 30)] == [20, 21]
    assert [t.number for t in st.stale.running("s", 30.0)] == [20, 21]
    st.close()
