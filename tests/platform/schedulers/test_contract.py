"""The scheduler contract (:mod:`hyperfleet.testing.schedulers`), checked for every scheduler
type the platform builds, on SQLite; the population schedulers, whose store is the platform's
own SQL, on PostgreSQL too, through the real server fixture.

Schedulers are built as the controller builds them (``build_scheduler`` on a validated sweep
and its storage); nothing runs but the scheduler.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.storage import Storage
from hyperfleet.testing.schedulers import STEPS, Built, SchedulerContract

OPTUNA_KINDS = ["tpe", "random", "grid", "cmaes", "qmc", "gp", "skopt", "nsga2"]
POPULATION_CASES = [(k, b) for b in ("sqlite", "postgresql") for k in ("pbt", "pb2")]


class TestOptunaSchedulers(SchedulerContract):
    @pytest.fixture(params=OPTUNA_KINDS)
    def sections(self, request: pytest.FixtureRequest) -> Mapping[str, Any]:
        return {
            "name": f"contract-{request.param}",
            "scheduler": {"type": request.param, "seed": 0},
            "pruner": {"type": "median", "n_startup_trials": 1},
            "budget": {"trials": 6},
        }


class TestPopulationSchedulers(SchedulerContract):
    """PBT and PB2: their state is the population store's SQL, on both backends."""

    @pytest.fixture(params=POPULATION_CASES, ids=[f"{k}-{b}" for k, b in POPULATION_CASES])
    def case(self, request: pytest.FixtureRequest) -> tuple[str, str]:
        return request.param  # type: ignore[no-any-return]

    @pytest.fixture
    def sections(self, case: tuple[str, str]) -> Mapping[str, Any]:
        kind = case[0]
        return {
            "name": f"contract-{kind}",
            "scheduler": {"type": kind, "seed": 0, "population": 4, "perturbation_interval": 2},
            "pruner": {"type": "none"},
            "budget": {"trials": None},  # the population is the budget
        }

    @pytest.fixture
    def storage_url(
        self, case: tuple[str, str], request: pytest.FixtureRequest, tmp_path: Path
    ) -> str:
        if case[1] == "sqlite":
            return f"sqlite:///{tmp_path / 'store.db'}"
        return str(request.getfixturevalue("postgres_url"))

    def snapshot(self, cfg: SweepConfig, storage: Storage) -> Any:
        from hyperfleet.platform.storage.population import SqlPopulationStore

        store = SqlPopulationStore(storage.engine)
        members = {
            n: {k: v for k, v in dataclasses.asdict(m).items() if k != "updated"}
            for n, m in store.members(cfg.name).items()
        }
        return members, [(e.member, e.generation, e.kind) for e in store.lineage(cfg.name)]

    def check_the_end(self, built: Built, launched: list[int]) -> None:
        assert set(launched) == set(range(built.cfg.scheduler.population))  # type: ignore[union-attr]
        members = built.scheduler.members().values()  # type: ignore[attr-defined]
        assert all(m.step == STEPS for m in members)
