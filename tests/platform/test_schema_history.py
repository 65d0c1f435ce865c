"""Every past schema opens: a database made by each earlier hyperfleet (its ``hf_*`` tables as
that code created them, recorded in ``schema_history/`` by ``schema_history/record.py``)
holding a sweep with a few trials and a worker is upgraded in place by a writer, and its sweep
and trials read as before; a database from before ``hf_meta`` is recognised by what it holds,
never stamped current without its columns; and the readers (``sweep status``, ``workers``) of
one not upgraded yet read what it has, without a traceback."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from hyperfleet.platform.cli import app
from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.schema import SCHEMA_VERSION, metadata
from hyperfleet.testing.sweeps import minimal_sweep
from tests.platform.schema_history import recorded

VERSIONS = recorded.load()
IDS = [v.name for v in VERSIONS]


def _insert(conn: sa.Connection, table: str, row: dict[str, Any]) -> None:
    """``row``'s values for the columns ``table`` had in that version."""
    held = {c["name"] for c in sa.inspect(conn).get_columns(table)}
    values = {k: v for k, v in row.items() if k in held}
    names = ", ".join(values)
    marks = ", ".join(f":{k}" for k in values)
    conn.execute(sa.text(f"INSERT INTO {table} ({names}) VALUES ({marks})"), values)


def build(version: recorded.Version, url: str) -> str:
    """A database of ``version``'s schema (its DDL in the URL's dialect) holding the sweep
    ``old``: two COMPLETE trials, a FAIL, and a worker where the version had workers."""
    engine = sa.create_engine(url)
    config = parse_sweep(minimal_sweep(name="old", storage=url)).model_dump(mode="json")
    now = time.time()
    with engine.begin() as conn:
        for statement in version.statements(engine.dialect.name):
            conn.execute(sa.text(statement))
        _insert(conn, "hf_sweeps", {
            "name": "old", "study_name": "old", "config": json.dumps(config),
            "created_at": now, "updated_at": now, "status": "done",
        })  # fmt: skip
        trials = [("COMPLETE", 0.5), ("COMPLETE", 0.125), ("FAIL", None)]
        for number, (state, loss) in enumerate(trials):
            _insert(conn, "hf_trials", {
                "sweep": "old", "number": number, "state": state,
                "params": json.dumps({"x": 0.1 * (number + 1)}), "host": "oldhost",
                "pid": 100, "heartbeat_at": now, "started_at": now, "ended_at": now,
                "attempts": 1, "last_step": 4,
                "metrics": json.dumps({} if loss is None else {"loss": loss}),
                "outcome": state.lower(), "error": "boom" if loss is None else None,
                "retries": 0,
            })  # fmt: skip
        if sa.inspect(conn).has_table("hf_workers"):
            _insert(conn, "hf_workers", {
                "id": "w-old", "host": "oldhost", "pid": 100, "pool": "default",
                "devices": json.dumps([]), "sweeps": json.dumps(["old"]), "started_at": now,
                "heartbeat_at": now, "state": "stopped",
            })  # fmt: skip
    engine.dispose()
    return url


def _reads(url: str) -> None:
    """``sweep status``, ``workers`` and ``sweep list`` read the sweep: its trials, its best."""
    runner = CliRunner()
    status = runner.invoke(app, ["sweep", "status", "old", "--storage", url], terminal_width=200)
    workers = runner.invoke(app, ["workers", "--storage", url], terminal_width=200)
    listed = runner.invoke(app, ["sweep", "list", "--storage", url], terminal_width=200)
    said = [r.output or repr(r.exception) for r in (status, workers, listed)]
    assert (status.exit_code, workers.exit_code, listed.exit_code) == (0, 0, 0), said
    assert "0.125" in listed.output
    assert "0.125" in status.output and "boom" in status.output, status.output
    assert "Traceback" not in workers.output


def test_every_recorded_version_is_distinct_and_the_first_has_no_version_table() -> None:
    texts = [v.ddl("sqlite") for v in VERSIONS]
    assert len(set(texts)) == len(texts) >= 10
    assert "hf_meta" not in texts[0]


@pytest.mark.parametrize("version", VERSIONS, ids=IDS)
def test_a_writer_upgrades_each_past_version_and_its_sweep_reads(
    version: recorded.Version, db_url: str
) -> None:
    url = build(version, db_url)
    Storage(url).close()  # what a sweep run, a worker or a submit does first
    engine = sa.create_engine(url)
    inspector = sa.inspect(engine)
    for table in metadata.tables.values():
        held = {c["name"] for c in inspector.get_columns(table.name)}
        assert held >= set(table.columns.keys()), (table.name, set(table.columns.keys()) - held)
    with engine.connect() as conn:
        stamped = conn.execute(sa.text("SELECT value FROM hf_meta")).scalar_one()
    engine.dispose()
    assert stamped == str(SCHEMA_VERSION)
    _reads(url)
    st = Storage.open_readonly(url)
    trials = st.trials.of("old")
    assert [(t.number, t.state.value, t.retries, t.worker) for t in trials] == [
        (0, "COMPLETE", 0, None),
        (1, "COMPLETE", 0, None),
        (2, "FAIL", 0, None),
    ]
    st.close()


@pytest.mark.parametrize("version", VERSIONS, ids=IDS)
def test_readers_of_a_past_version_not_upgraded_read_what_it_has(
    version: recorded.Version, db_url: str
) -> None:
    url = build(version, db_url)
    before = _held(url)
    _reads(url)
    assert _held(url) == before  # a reader neither upgrades nor stamps


def _held(url: str) -> tuple[dict[str, set[str]], list[Any]]:
    """The tables and columns a database has, and its ``hf_meta`` rows."""
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        inspector = sa.inspect(conn)
        tables = {
            t: {c["name"] for c in inspector.get_columns(t)} for t in inspector.get_table_names()
        }
        meta = list(conn.execute(sa.text("SELECT * FROM hf_meta"))) if "hf_meta" in tables else []
    engine.dispose()
    return tables, meta


@pytest.mark.slow
def test_the_dashboard_and_load_read_the_oldest_version_not_upgraded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dashboard's pages and ``hyperfleet.load`` on a database from before ``hf_meta``."""
    from streamlit.testing.v1 import AppTest

    import hyperfleet

    url = build(VERSIONS[0], f"sqlite:///{tmp_path / 'old.db'}")
    assert hyperfleet.load("old", storage=url).best_value == 0.125
    monkeypatch.setenv("HYPERFLEET_STORAGE", url)
    app_file = Path(hyperfleet.__file__).parent / "dashboards" / "app.py"
    at = AppTest.from_file(str(app_file), default_timeout=60).run()
    assert not at.exception and not at.error
    for view in ("sweep", "compare", "population", "devices"):
        at.switch_page(f"views/{view}.py").run()
        assert not at.exception and not at.error, (view, at.exception, at.error)


def test_a_database_stamped_current_without_a_column_gains_it(tmp_path: Path) -> None:
    """The slurm branch's version 3 lacked hf_leases.share; the upgrade of main (which added
    only the columns of versions above the stamp) then stamped it 4 without them."""
    url = build(VERSIONS[IDS.index("2026-12-05-6754024")], f"sqlite:///{tmp_path / 'old.db'}")
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE hf_meta SET value = :v"), {"v": str(SCHEMA_VERSION)})
    Storage(url).close()
    held = {c["name"] for c in sa.inspect(engine).get_columns("hf_leases")}
    engine.dispose()
    assert {"share", "per_device"} <= held
