"""A new local MLflow store is a copy of a migrated template, and equal to one MLflow makes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from hyperfleet.platform.tracking.client import open_client
from hyperfleet.platform.tracking.seed import seed_store, template_path


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache directory of this module's own, with the template made once (MLflow migrates)."""
    root = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(root))
        assert seed_store(root / "first.db")
    return root


@pytest.fixture
def cached(cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return template_path()


def _schema(db: Path) -> tuple[set[tuple[str, str]], list[tuple[str, ...]]]:
    con = sqlite3.connect(db)
    try:
        tables = set(
            con.execute("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
        )
        return tables, list(con.execute("SELECT version_num FROM alembic_version"))
    finally:
        con.close()


def test_a_seeded_store_is_the_store_mlflow_makes(
    cached: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    monkeypatch.chdir(tmp_path)
    made = tmp_path / "made.db"
    MlflowClient(tracking_uri=f"sqlite:///{made}").search_experiments()  # MLflow's migrations
    seeded = tmp_path / "seeded.db"
    before = cached.stat().st_mtime_ns
    client = open_client(f"sqlite:///{seeded}")
    assert seeded.is_file() and cached.stat().st_mtime_ns == before, "the template was reused"
    assert _schema(seeded) == _schema(made)
    default, = client.search_experiments()  # fmt: skip
    want, = MlflowClient(tracking_uri=f"sqlite:///{made}").search_experiments()  # fmt: skip
    assert (default.experiment_id, default.name) == ("0", "Default")
    assert default.artifact_location == want.artifact_location  # computed for this store
    run = client.create_run(client.create_experiment("e")).info.run_id
    client.log_metric(run, "loss", 0.5, step=1)
    assert client.get_metric_history(run, "loss")[0].value == 0.5


def test_an_existing_store_or_a_missing_directory_is_left_alone(
    cached: Path, tmp_path: Path
) -> None:
    existing = tmp_path / "mlflow.db"
    existing.write_bytes(b"")
    assert not seed_store(existing)
    assert existing.read_bytes() == b""
    assert not seed_store(tmp_path / "nowhere" / "mlflow.db")
    assert not (tmp_path / "nowhere").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["mlflow.db"], "no copy left behind"


def test_without_a_usable_cache_mlflow_makes_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    assert not seed_store(tmp_path / "mlflow.db")
    assert not (tmp_path / "mlflow.db").exists()
    client = open_client(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert [e.name for e in client.search_experiments()] == ["Default"]
