"""``hyperfleet sweep delete`` and ``hyperfleet.load(name).delete()`` on sweeps that ran, on
SQLite and a real local MLflow store (MLflow's SQLite file; its filesystem store is closed to
new runs in MLflow 3): every row naming the sweep, its Optuna study, its run
directory and its MLflow runs (the sweep's and each trial's) go, and ``sweep run`` of the same
name starts afresh; ``--keep-files`` keeps the files (moved aside, the name free); a "no" at
the question, a sweep that a ``sweep run`` serves, and an unknown name change nothing."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy as sa
import yaml

import hyperfleet
from hyperfleet.errors import ConfigError
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.ownership import MARKER
from hyperfleet.platform.storage.schema import metadata
from hyperfleet.spec.states import TrialState
from hyperfleet.testing.sweeps import minimal_sweep
from hyperfleet.testing.workloads import held_marker
from tests.integration.cli import cli_env, invoke, wait_until


@dataclass(frozen=True)
class Ran:
    """A sweep file and its stores, after ``sweep run`` of it."""

    name: str
    file: Path
    storage: str
    tracking: str
    run_dir: Path


def _file(tmp_path: Path, name: str, tracking: str, **changes: Any) -> Path:
    runs = tmp_path / "runs"
    data = minimal_sweep(
        name=name, workdir=str(runs), storage=f"sqlite:///{runs / 'hf.db'}",
        tracking={"uri": tracking, "log_model": False}, **changes,
    )  # fmt: skip
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _run(path: Path) -> None:
    result = invoke("sweep", "run", str(path))
    assert result.exit_code == 0, result.output


def _mlflow(tmp_path: Path, template: Path) -> str:
    """A local MLflow store (SQLite, a migrated copy) under ``tmp_path/runs``: its URI."""
    runs = tmp_path / "runs"
    runs.mkdir(exist_ok=True)
    shutil.copy(template, runs / "mlflow.db")
    return f"sqlite:///{runs / 'mlflow.db'}"


@pytest.fixture
def ran(tmp_path: Path, mlflow_template: Path) -> Ran:
    """Sweep ``gone`` (two trials) run to its end."""
    tracking = _mlflow(tmp_path, mlflow_template)
    path = _file(tmp_path, "gone", tracking)
    _run(path)
    runs = tmp_path / "runs"
    return Ran("gone", path, f"sqlite:///{runs / 'hf.db'}", tracking, runs / "gone")


def rows(url: str, name: str) -> dict[str, int]:
    """The rows naming sweep ``name``, by table (every ``hf_*`` table with a sweep column)."""
    engine = sa.create_engine(url)
    counts = {}
    with engine.connect() as conn:
        for table in metadata.sorted_tables:
            column = "name" if table.name == "hf_sweeps" else "sweep"
            if column in table.c and sa.inspect(conn).has_table(table.name):
                q = sa.select(sa.func.count()).where(table.c[column] == name)
                counts[table.name] = int(conn.scalar(q) or 0)
    engine.dispose()
    return counts


def runs_of(tracking: str, name: str) -> dict[str, str]:
    """The sweep's MLflow runs, active and deleted: run id -> lifecycle stage."""
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking)
    exp = client.get_experiment_by_name(name)
    assert exp is not None and exp.lifecycle_stage == "active"
    found = client.search_runs([exp.experiment_id], run_view_type=ViewType.ALL)
    return {r.info.run_id: r.info.lifecycle_stage for r in found}


def _studies(url: str) -> list[str]:
    return optuna.get_all_study_names(storage=url)


def _intact(r: Ran, before: dict[str, int], runs: dict[str, str]) -> None:
    assert rows(r.storage, r.name) == before
    assert _studies(r.storage) == [r.name]
    assert (r.run_dir / MARKER).is_file() and (r.run_dir / "trial-0000" / "log.txt").is_file()
    assert runs_of(r.tracking, r.name) == runs and set(runs.values()) == {"active"}


def test_delete_takes_the_sweep_whole_and_frees_its_name(ran: Ran) -> None:
    before = rows(ran.storage, ran.name)
    assert before["hf_sweeps"] == 1 and before["hf_trials"] == 2 and before["hf_leases"] >= 2
    runs = runs_of(ran.tracking, ran.name)
    assert len(runs) == 3  # the sweep's run and its two trials'
    _intact(ran, before, runs)
    created = Storage.open_readonly(ran.storage).sweeps.get(ran.name)
    assert created is not None

    result = invoke("sweep", "delete", ran.name, "--storage", ran.storage, "--yes")
    assert result.exit_code == 0, result.output
    assert "2 trial(s)" in result.stdout and f"files: {ran.run_dir}" in result.stdout
    assert f"deleted sweep {ran.name!r}" in result.stdout and "3 MLflow runs" in result.stdout
    assert set(rows(ran.storage, ran.name).values()) == {0}
    assert _studies(ran.storage) == []
    assert not ran.run_dir.exists()
    assert runs_of(ran.tracking, ran.name) == dict.fromkeys(runs, "deleted")

    _run(ran.file)  # the name is free: a new sweep, its trials numbered from 0 again
    st = Storage.open_readonly(ran.storage)
    again = st.sweeps.get(ran.name)
    trials = st.trials.of(ran.name)
    st.close()
    assert again is not None and again.created_at > created.created_at
    assert [(t.number, t.state) for t in trials] == [(n, TrialState.COMPLETE) for n in (0, 1)]
    assert len([s for s in runs_of(ran.tracking, ran.name).values() if s == "active"]) == 3


def test_keep_files_keeps_them_aside_and_frees_the_name(ran: Ran) -> None:
    result = invoke("sweep", "delete", ran.name, "--storage", ran.storage, "--yes", "--keep-files")
    assert result.exit_code == 0, result.output
    (aside,) = ran.run_dir.parent.glob(f"{ran.name}.deleted-*")
    assert (aside / "trial-0000" / "log.txt").is_file() and (aside / "trial-0001").is_dir()
    assert f"kept {ran.run_dir} as {aside}" in result.stdout.replace("\n", " ")
    assert set(rows(ran.storage, ran.name).values()) == {0}
    assert set(runs_of(ran.tracking, ran.name).values()) == {"deleted"}
    _run(ran.file)
    assert (ran.run_dir / MARKER).is_file() and aside.is_dir()


@pytest.mark.parametrize("answer", ["n\n", ""])  # a no, and no answer at all (a pipe)
def test_a_no_changes_nothing(ran: Ran, answer: str) -> None:
    before, runs = rows(ran.storage, ran.name), runs_of(ran.tracking, ran.name)
    from typer.testing import CliRunner

    from hyperfleet.platform.cli import app

    args = ["sweep", "delete", ran.name, "--storage", ran.storage]
    result = CliRunner().invoke(app, args, input=answer)
    assert result.exit_code == 1, result.output
    assert "Delete sweep 'gone'?" in result.stdout and "nothing deleted" in result.stderr
    _intact(ran, before, runs)


def test_an_unknown_name_is_one_line_with_the_closest(ran: Ran) -> None:
    result = invoke("sweep", "delete", "goen", "--storage", ran.storage, "--yes")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no sweep named 'goen'" in lines[0], lines
    assert "did you mean 'gone'" in lines[0]
    assert rows(ran.storage, ran.name)["hf_sweeps"] == 1


def test_a_served_sweep_is_refused_with_nothing_changed(
    tmp_path: Path, mlflow_template: Path
) -> None:
    release = tmp_path / "release"
    tracking = _mlflow(tmp_path, mlflow_template)
    hold = {"hold_file": str(release), "hold_at": 2, "hold_trial": 0}
    path = _file(tmp_path, "busy", tracking, budget={"trials": 1, "max_concurrent": 1},
                 trial={"params": hold})  # fmt: skip
    cmd = [sys.executable, "-m", "hyperfleet.platform", "sweep", "run", str(path)]
    proc = subprocess.Popen(cmd, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        wait_until(held_marker(release, 0).exists, "trial 0 held at step 2", proc)
        url = f"sqlite:///{tmp_path / 'runs' / 'hf.db'}"
        before = rows(url, "busy")
        result = invoke("sweep", "delete", "busy", "--storage", url, "--yes")
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "being served now" in lines[0], lines
        assert "trial 0 on" in lines[0] and "hyperfleet sweep stop busy" in lines[0]
        assert rows(url, "busy") == before and _studies(url) == ["busy"]
        assert (tmp_path / "runs" / "busy" / "trial-0000").is_dir()
        assert set(runs_of(tracking, "busy").values()) == {"active"}
    finally:
        release.touch()
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    done = invoke("sweep", "delete", "busy", "--storage", url, "--yes")  # ended: it goes
    assert done.exit_code == 0, done.output


def test_load_delete_from_python(tmp_path: Path, mlflow_template: Path) -> None:
    runs = tmp_path / "runs"
    tracking = _mlflow(tmp_path, mlflow_template)
    path = _file(tmp_path, "py", tracking)
    hyperfleet.run(str(path), progress=False)
    url = f"sqlite:///{runs / 'hf.db'}"
    assert len(runs_of(tracking, "py")) == 3
    deleted = hyperfleet.load("py", storage=url).delete(keep_files=True)
    assert deleted.rows >= 3 and deleted.study and deleted.runs == 3 and not deleted.files
    assert set(rows(url, "py").values()) == {0}
    assert set(runs_of(tracking, "py").values()) == {"deleted"}
    assert not (runs / "py").exists() and any(runs.glob("py.deleted-*"))
    with pytest.raises(ConfigError, match="no sweep named 'py'"):
        hyperfleet.load("py", storage=url)


def test_the_claim_lock_and_the_rows_on_each_backend(db_url: str) -> None:
    """Deleting under the sweep's claim lock (an advisory lock on PostgreSQL, a file lock on
    SQLite) with trials and leases stored, the sweep never opened in MLflow."""
    from hyperfleet.platform.sweeps.delete import delete_sweep, plan_deletion

    st = Storage(db_url)
    st.sweeps.create("stub", {})
    for number in (0, 1):
        st.trials.upsert("stub", number, state=TrialState.RUNNING, worker="w")  # its claim
        st.trials.launch_attempt("stub", number, ["cpu:0"], state=TrialState.RUNNING, worker="w")
        st.trials.upsert("stub", number, state=TrialState.COMPLETE)
    st.close()
    plan = plan_deletion(db_url, "stub")
    assert plan.trials == 2 and plan.run_dir is None and plan.parent_run_id is None
    deleted = delete_sweep(plan)
    assert (deleted.runs, deleted.notes) == (0, ())
    assert deleted.rows == 5  # the sweep, two trials, two leases
    assert set(rows(db_url, "stub").values()) == {0}
