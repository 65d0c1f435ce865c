"""Every past schema opens: a database made by each earlier hyperfleet (its ``hf_*`` tables as
that code created them, recorded in ``schema_history/*.sql`` by ``schema_history/record.py``)
holding a sweep with a few trials and a worker is upgraded in place by a writer, and its sweep
and trials read as before; a database from before ``hf_meta`` is recognised by what it holds,
never stamped current without its columns; and the readers (``sweep status``, ``workers``) of
one not upgraded yet read what it has, without a traceback."""

from __future__ import annotations

import sqlite3
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

HISTORY = Path(__file__).resolve().parent / "schema_history"
VERSIONS = sorted(HISTORY.glob("*.sql"))


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def _insert(db: sqlite3.Connection, table: str, row: dict[str, Any]) -> None:
    """``row``'s values for the columns ``table`` had in that version."""
    held = {k: v for k, v in row.items() if k in _columns(db, table)}
    marks = ", ".join("?" for _ in held)
    db.execute(f"INSERT INTO {table} ({', '.join(held)}) VALUES ({marks})", list(held.values()))


def build(version: Path, path: Path) -> str:
    """A database of ``version``'s schema holding the sweep ``old``: two COMPLETE trials, a
    FAIL, and a worker where the version had workers."""
    import json

    url = f"sqlite:///{path}"
    config = parse_sweep(minimal_sweep(name="old", storage=url)).model_dump(mode="json")
    now = time.time()
    db = sqlite3.connect(path)
    db.executescript(version.read_text())
    _insert(db, "hf_sweeps", {
        "name": "old", "study_name": "old", "config": json.dumps(config),
        "created_at": now, "updated_at": now, "status": "done",
    })  # fmt: skip
    for number, (state, loss) in enumerate(
        [("COMPLETE", 0.5), ("COMPLETE", 0.125), ("FAIL", None)]
    ):
        _insert(db, "hf_trials", {
            "id": number + 1, "sweep": "old", "number": number, "state": state,
            "params": json.dumps({"x": 0.1 * (number + 1)}), "host": "oldhost", "pid": 100,
            "heartbeat_at": now, "started_at": now, "ended_at": now, "attempts": 1,
            "last_step": 4, "metrics": json.dumps({} if loss is None else {"loss": loss}),
            "outcome": state.lower(), "error": "boom" if loss is None else None, "retries": 0,
        })  # fmt: skip
    if "hf_workers" in {r[0] for r in db.execute("SELECT name FROM sqlite_master")}:
        _insert(db, "hf_workers", {
            "id": "w-old", "host": "oldhost", "pid": 100, "pool": "default",
            "devices": json.dumps([]), "sweeps": json.dumps(["old"]), "started_at": now,
            "heartbeat_at": now, "state": "stopped",
        })  # fmt: skip
    db.commit()
    db.close()
    return url


def _reads(url: str) -> None:
    """``sweep status`` and ``workers`` read the sweep: its trials, its best value."""
    runner = CliRunner()
    status = runner.invoke(app, ["sweep", "status", "old", "--storage", url], terminal_width=200)
    workers = runner.invoke(app, ["workers", "--storage", url], terminal_width=200)
    said = [r.output or repr(r.exception) for r in (status, workers)]
    assert (status.exit_code, workers.exit_code) == (0, 0), said
    assert "0.125" in status.output and "boom" in status.output, status.output
    assert "Traceback" not in workers.output


def test_every_recorded_version_is_distinct_and_the_first_has_no_version_table() -> None:
    texts = [v.read_text().split("\n", 1)[1] for v in VERSIONS]
    assert len(set(texts)) == len(texts) >= 10
    assert "hf_meta" not in texts[0]


@pytest.mark.parametrize("version", VERSIONS, ids=[v.stem for v in VERSIONS])
def test_a_writer_upgrades_each_past_version_and_its_sweep_reads(
    version: Path, tmp_path: Path
) -> None:
    url = build(version, tmp_path / "old.db")
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
    trials = st.trials("old")
    assert [(t.number, t.state.value, t.retries, t.worker) for t in trials] == [
        (0, "COMPLETE", 0, None),
        (1, "COMPLETE", 0, None),
        (2, "FAIL", 0, None),
    ]
    st.close()


@pytest.mark.parametrize("version", VERSIONS, ids=[v.stem for v in VERSIONS])
def test_readers_of_a_past_version_not_upgraded_read_what_it_has(
    version: Path, tmp_path: Path
) -> None:
    url = build(version, tmp_path / "old.db")
    before = (tmp_path / "old.db").read_bytes()
    _reads(url)
    assert (tmp_path / "old.db").read_bytes() == before  # a reader changes nothing


@pytest.mark.slow
def test_the_dashboard_and_load_read_the_oldest_version_not_upgraded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dashboard's pages and ``hyperfleet.load`` on a database from before ``hf_meta``."""
    from streamlit.testing.v1 import AppTest

    import hyperfleet

    url = build(VERSIONS[0], tmp_path / "old.db")
    assert hyperfleet.load("old", storage=url).best_value == 0.125
    monkeypatch.setenv("HYPERFLEET_STORAGE", url)
    app_file = Path(hyperfleet.__file__).parent / "dashboards" / "app.py"
    at = AppTest.from_file(str(app_file), default_timeout=60).run()
    assert not at.exception and not at.error
    for view in ("sweep", "compare", "population", "devices"):
        at.switch_page(f"views/{view}.py").run()
        assert not at.exception and not at.error, (view, at.exception, at.error)
