"""Worker rows that name a batch job: the schema's version 3 (and the upgrade of a version-2
database), the pool's pending rows, Slurm's word on each job in ``hyperfleet workers``, and
the pool command's bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from hyperfleet.platform.storage import SCHEMA_VERSION, Storage, WorkerRecord
from hyperfleet.platform.storage.schema import schema_version
from hyperfleet.spec.states import JobState, WorkerState
from tests.integration.cli import invoke


def test_a_version_2_database_is_read_as_it_is_and_gains_the_job_columns(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'v2.db'}"
    st = Storage(url)  # made as version 2 was: hf_workers without the job columns
    st.workers.register(
        WorkerRecord(
            id="w", host="h", pid=1, pool="default", devices=[], address=None, sweeps=None,
            started_at=1.0, heartbeat_at=1.0, state=WorkerState.STOPPED,
        )
    )  # fmt: skip
    with st.engine.begin() as conn:
        for column in ("job_id", "job_state", "job_reason"):
            conn.execute(sa.text(f"ALTER TABLE hf_workers DROP COLUMN {column}"))
        conn.execute(sa.text("UPDATE hf_meta SET value = '2'"))
    st.close()
    reader = Storage.open_readonly(url)  # a reader reads it as it is
    (old,) = reader.workers.all()
    assert (old.id, old.job_id, old.job_state) == ("w", None, None)
    reader.close()
    Storage(url).close()  # a writer: columns added (idempotently: twice)
    st = Storage(url)
    with st.engine.connect() as conn:
        assert schema_version(conn) == SCHEMA_VERSION == 5  # upgraded to the current version
    (old,) = st.workers.all()
    assert (old.id, old.job_id, old.job_state) == ("w", None, None)
    st.close()


def pending_row(job: str) -> WorkerRecord:
    return WorkerRecord(
        id=f"slurm-{job}", host="", pid=0, pool="gpu", devices=[], address=None, sweeps=None,
        started_at=1.0, heartbeat_at=1.0, state=WorkerState.PENDING, job_id=job,
        job_state=JobState.PENDING,
    )  # fmt: skip


def test_workers_shows_each_job_with_slurms_state_and_reason(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hf.db'}"
    st = Storage(url)
    st.workers.register(pending_row("41"))
    st.workers.register(pending_row("42"))
    st.workers.set_job("41", JobState.PENDING, "PartitionConfig")
    st.workers.register(
        WorkerRecord(
            id="n1-7-abc", host="n1", pid=7, pool="gpu", devices=["cpu:0"], address=None,
            sweeps=None, started_at=2.0, heartbeat_at=st.now(), state=WorkerState.ACTIVE,
            job_id="42",
        )
    )  # fmt: skip
    st.workers.set_job("42", JobState.RUNNING, None)  # its worker registered: the pending row ends
    assert [w.id for w in st.workers.live(30.0)] == ["n1-7-abc"], "a pending job is no worker"
    st.close()
    result = invoke("workers", "--storage", url, "--json")
    assert result.exit_code == 0, result.output
    shown = {x["worker"]: x for x in json.loads(result.stdout)}
    assert set(shown) == {"slurm-41", "n1-7-abc"}
    assert (shown["slurm-41"]["state"], shown["slurm-41"]["host"]) == ("pending", "-")
    assert shown["slurm-41"]["job"] == "41"
    assert shown["slurm-41"]["job state"] == "PENDING (PartitionConfig)"
    assert (shown["n1-7-abc"]["job"], shown["n1-7-abc"]["job state"]) == ("42", "RUNNING")
    table = invoke("workers", "--storage", url)
    assert table.exit_code == 0, table.output


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--max-workers", "0"], "--max-workers"),
        (["--max-workers", "2", "--min-workers", "3"], "--min-workers"),
        (["--max-workers", "2", "--idle", "soon"], "--idle"),
        (["--max-workers", "2", "--tracking-uri", "gopher://x"], "--tracking-uri"),
    ],
)
def test_bad_pool_flags_are_one_line_and_exit_2(tmp_path: Path, args: list[str],
                                                flag: str) -> None:  # fmt: skip
    db = tmp_path / "hf.db"
    result = invoke("pool", "slurm", "--storage", f"sqlite:///{db}", *args, "--once")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0], lines
    assert not db.exists(), "nothing written"
