"""The dashboard tests' shared storage: real small sweeps, run once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.dashboards.sweeps import Filled, run


@pytest.fixture(scope="session")
def filled(tmp_path_factory: pytest.TempPathFactory, mlflow_template: Path) -> Filled:
    """A storage with the sweeps of :mod:`tests.dashboards.sweeps`."""
    return run(tmp_path_factory.mktemp("dashboard-sweeps"), mlflow_template)
