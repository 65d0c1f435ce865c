"""Optuna's own storage conformance suite (``optuna.testing.pytest_storages.StorageTestCase``)
run against the storage the platform gives every study: ``internals.lean_storage`` (a
``LeanCachedStorage``) over the platform's ``RDBStorage`` (``storage.engine.shared_optuna``, what
``Storage.optuna`` hands ``scheduler.open_study``), on a SQLite file and on PostgreSQL.

Each test gets an empty database (the suite counts the studies it made). The suite's
``storage`` fixture is overridden per backend, as Optuna's own tests do; no test of it is
skipped. What the suite does not check (a cached running trial's writes seen by the next
read of the history) is ``test_cache_contract.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from optuna.storages import BaseStorage
from optuna.testing.pytest_storages import StorageTestCase

from hyperfleet.platform.schedulers.optuna import internals
from hyperfleet.platform.storage.engine import release_optuna, shared_optuna


def lean_storage(url: str) -> Iterator[BaseStorage]:
    """The platform's storage for a study on ``url`` (as ``open_study`` wraps
    ``Storage.optuna``), given back when the test ends."""
    rdb = shared_optuna(url, readonly=False, create=True)
    storage = internals.lean_storage(rdb)
    assert isinstance(storage, internals.LeanCachedStorage)
    try:
        yield storage
    finally:
        rdb.remove_session()
        release_optuna(rdb)


class TestLeanCachedStorageOnSQLite(StorageTestCase):
    @pytest.fixture
    def storage(self, tmp_path: Path) -> Iterator[BaseStorage]:
        yield from lean_storage(f"sqlite:///{tmp_path / 'optuna.db'}")


@pytest.mark.postgres
class TestLeanCachedStorageOnPostgreSQL(StorageTestCase):
    @pytest.fixture
    def storage(self, postgres_url: str) -> Iterator[BaseStorage]:
        yield from lean_storage(postgres_url)
