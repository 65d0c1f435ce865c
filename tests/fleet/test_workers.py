"""Workers on many hosts (here: many processes, each with devices of its own) sharing sweeps
through one PostgreSQL storage: exact claims, drains, lost workers, elastic joins."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.fleet.conftest import Fleet
from tests.integration.cli import cli

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

NOOP: dict[str, Any] = {
    "name": "many",
    "objective": {"metric": "loss", "mode": "min"},
    "scheduler": {"type": "random", "seed": 0},
    "budget": {"trials": 40, "max_concurrent": 40},
    "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
    "trial": {
        "workload": "tests.integration.workloads:quadratic",
        "steps": 2,
        "eval_every": 1,
        "resources": {"devices": 0},
    },
}


def test_sixteen_workers_run_exactly_the_budget_and_no_trial_twice(fleet: Fleet) -> None:
    fleet.submit(fleet.sweep(NOOP))
    for i in range(16):
        fleet.start(f"w{i}", "--devices", "cpu:1", "--exit-when-idle", "8s")
    fleet.finish()
    trials = fleet.trials("many")
    assert len(trials) == 40
    assert {t.state for t in trials.values()} == {"COMPLETE"}
    assert all(t.attempts == 1 for t in trials.values()), "a trial was launched twice"
    leases = fleet.storage().leases("many")
    assert sorted(Counter(x.trial for x in leases).values()) == [1] * 40, "claimed twice"
    assert all(x.ended_at is not None for x in leases), "a lease is still held"
    assert len({x.worker for x in leases}) > 1, "the work was shared"
    status = cli("sweep", "list", "--storage", fleet.storage_url)
    assert "done" in status.stdout


def test_a_population_spread_over_four_workers_exploits_once_per_decision(fleet: Fleet) -> None:
    pbt = {
        "name": "spread",
        "objective": {"metric": "Q", "mode": "max"},
        "scheduler": {"type": "pbt", "population": 8, "perturbation_interval": 4, "seed": 0,
                      "resample_probability": 0.5},
        "budget": {"max_concurrent": 8},
        "space": {"h0": {"type": "float", "low": 0.0, "high": 1.0},
                  "h1": {"type": "float", "low": 0.0, "high": 1.0}},
        "trial": {"workload": "examples.pbt_toy:main", "params": {"lr": 0.05}, "steps": 40,
                  "eval_every": 4, "resources": {"devices": 0}},
    }  # fmt: skip
    fleet.submit(fleet.sweep(pbt))
    for i in range(4):
        fleet.start(f"w{i}", "--devices", "cpu:2", "--exit-when-idle", "8s")
    fleet.finish()
    from hyperfleet.platform.schedulers.population import SqlPopulationStore

    st = fleet.storage()
    members = SqlPopulationStore(st.engine).members("spread")
    lineage = SqlPopulationStore(st.engine).lineage("spread")
    assert len(members) == 8 and all(m.step == 40 for m in members.values())
    keys = [(e.member, e.generation, e.kind) for e in lineage]
    assert len(keys) == len(set(keys)), "an exploit was recorded twice"
    exploits = [e for e in lineage if e.kind == "exploit"]
    assert exploits, "the population exploited"
    for e in exploits:  # each decision made once: its explore twin, and the generation count
        assert (e.member, e.generation, "explore") in set(keys)
    for n, m in members.items():
        assert m.generation == sum(1 for e in exploits if e.member == n)
    assert len({x.worker for x in st.leases("spread")}) > 1
    assert {t.state for t in st.trials("spread")} == {"COMPLETE"}
