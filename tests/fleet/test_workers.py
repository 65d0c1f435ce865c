"""Workers on many hosts (here: many processes, each with devices of its own) sharing sweeps
through one PostgreSQL storage: exact claims, drains, lost workers, elastic joins."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from hyperfleet.testing.sweeps import digits_sweep, minimal_sweep
from tests.conftest import deep_update
from tests.fleet.conftest import Fleet, Worker, toy_population
from tests.integration.cli import cli, invoke

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

NOOP = minimal_sweep(name="many", budget={"trials": 40, "max_concurrent": 40}, trial={"steps": 2})


@pytest.mark.long
def test_sixteen_workers_run_exactly_the_budget_and_no_trial_twice(fleet: Fleet) -> None:
    fleet.submit(fleet.sweep(NOOP))
    for i in range(16):
        fleet.start(f"w{i}", "--devices", "cpu:1", "--exit-when-idle", "4s")
    fleet.finish()  # each leaves 4 s after the last trial anywhere ended
    trials = fleet.trials("many")
    assert len(trials) == 40
    assert {t.state for t in trials.values()} == {"COMPLETE"}
    assert all(t.attempts == 1 for t in trials.values()), "a trial was launched twice"
    leases = fleet.storage().leases.all("many")
    assert sorted(Counter(x.trial for x in leases).values()) == [1] * 40, "claimed twice"
    assert all(x.ended_at is not None for x in leases), "a lease is still held"
    assert len({x.worker for x in leases}) > 1, "the work was shared"
    status = invoke("sweep", "list", "--storage", fleet.storage_url)
    assert status.exit_code == 0 and "done" in status.stdout
    # each says how the sweep ended as it leaves (the one that ended it read the trials, the
    # others counted them)
    for w in fleet.workers:
        assert "sweep many: COMPLETE 40\n" in w.text(), w.text()[-2000:]


@pytest.mark.long
def test_a_population_spread_over_four_workers_exploits_once_per_decision(fleet: Fleet) -> None:
    pbt = toy_population("spread", 8, {})
    fleet.submit(fleet.sweep(pbt))
    for i in range(4):
        fleet.start(f"w{i}", "--devices", "cpu:2", "--exit-when-idle", "8s")
    fleet.finish()
    from hyperfleet.platform.storage.population import SqlPopulationStore

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
    assert len({x.worker for x in st.leases.all("spread")}) > 1
    assert {t.state for t in st.trials.of("spread")} == {"COMPLETE"}


DIGITS = digits_sweep(
    name="digits-shared",
    budget={"trials": 12, "max_concurrent": 4},
    trial={"resources": {"devices": 1}},
)


def held(data: dict[str, Any], fleet: Fleet) -> dict[str, Any]:
    """``data`` with every trial holding at its first report at or past step 20 (a
    checkpoint) until :func:`release`: the test acts on trials that are surely mid-run."""
    hold = {"hold_file": str(fleet.root / "release"), "hold_at": 20}
    return deep_update(data, {"trial": {"workload": "tests.integration.workloads:held_digits",
                                        "params": hold}})  # fmt: skip


def release(fleet: Fleet) -> None:
    (fleet.root / "release").touch()


def _mlflow_steps(fleet: Fleet, run_id: str, metric: str) -> list[int]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{fleet.root / 'mlflow.db'}")
    return [m.step for m in client.get_metric_history(run_id, metric)]


def lose_a_worker(
    fleet: Fleet, a: Worker, b: Worker, meanwhile: Callable[[], None] = lambda: None
) -> None:
    """Worker ``a`` is killed (SIGKILL) while it runs a checkpointed trial of ``DIGITS``
    (submitted :func:`held`; released after the kill); ``meanwhile`` runs just before. The
    sweep must still end with its 12 trials COMPLETE, ``a``'s resumed by ``b`` from their
    checkpoints in the same MLflow runs, no step logged twice, and no lease held."""
    a_id = a.id(fleet)

    def a_has_a_checkpointed_trial() -> bool:
        return any(
            t.worker == a_id and t.state == "RUNNING" and (t.last_step or 0) >= 20
            for t in fleet.trials("digits-shared").values()
        )

    fleet.wait(a_has_a_checkpointed_trial, 600, "a trial of worker a past step 20")
    meanwhile()
    victims = {
        n: t for n, t in fleet.trials("digits-shared").items()
        if t.worker == a_id and t.state == "RUNNING"
    }  # fmt: skip
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait()
    fleet.workers.remove(a)
    release(fleet)
    fleet.finish()
    trials = fleet.trials("digits-shared")
    assert len(trials) == 12 and {t.state for t in trials.values()} == {"COMPLETE"}
    b_id = b.id(fleet)
    for n, before in victims.items():
        after = trials[n]
        assert after.worker == b_id and after.attempts == before.attempts + 1
        assert after.mlflow_run_id == before.mlflow_run_id, "one MLflow run"
        steps = _mlflow_steps(fleet, after.mlflow_run_id or "", "val_accuracy")
        assert len(steps) == len(set(steps)), f"a step reported twice: {sorted(steps)}"
        log = (fleet.root / "runs" / "digits-shared" / f"trial-{n:04d}" / "log.txt").read_text()
        if (before.last_step or 0) >= 10:
            assert "resumes from its checkpoint" in log
    leases = fleet.storage().leases.all("digits-shared")
    assert all(x.ended_at is not None for x in leases), "no lease is held"
    assert {x.state for x in leases if x.worker == a_id} <= {"LOST", "COMPLETE"}


@pytest.mark.long
def test_a_killed_worker_costs_one_checkpoint(fleet: Fleet) -> None:
    fleet.submit(fleet.sweep(held(DIGITS, fleet)))
    a = fleet.start("a", "--devices", "cpu:2", "--exit-when-idle", "6s")
    b = fleet.start("b", "--devices", "cpu:2", "--exit-when-idle", "6s")
    lose_a_worker(fleet, a, b)


@pytest.mark.long
def test_workers_join_mid_sweep_and_a_drained_worker_hands_back_its_trial(fleet: Fleet) -> None:
    data = deep_update(DIGITS, {"name": "elastic", "budget": {"trials": 4, "max_concurrent": 4},
                                "trial": {"steps": 80}})  # fmt: skip
    fleet.submit(fleet.sweep(held(data, fleet)))
    a = fleet.start("a", "--devices", "cpu:1")
    a_id = a.id(fleet)
    fleet.wait(lambda: any((t.last_step or 0) >= 20 for t in fleet.trials("elastic").values()),
               600, "worker a's trial past step 20")  # fmt: skip
    b = fleet.start("b", "--devices", "cpu:1", "--exit-when-idle", "6s")
    b_id = b.id(fleet)
    st = fleet.storage()
    registered = next(w.started_at for w in st.workers.all() if w.id == b_id)
    fleet.wait(lambda: any(t.worker == b_id for t in fleet.trials("elastic").values()),
               120, "worker b to take a trial")  # fmt: skip
    first = min(t.started_at for t in fleet.trials("elastic").values() if t.worker == b_id)
    # at its first polls, not after a stale timeout (30 s); 1.9 s once under the long lane's load
    assert first - registered <= 5.0, "claimed within a few poll intervals of registering"
    handed = {n: t.last_step or 0 for n, t in fleet.trials("elastic").items()
              if t.worker == a_id and t.state == "RUNNING"}  # fmt: skip
    a.proc.send_signal(signal.SIGTERM)
    assert a.proc.wait(timeout=120) == 130
    fleet.workers.remove(a)
    after = fleet.trials("elastic")
    assert handed, "worker a held a trial when it was drained"
    for n in handed:
        assert after[n].state in ("WAITING", "RUNNING"), "handed back, not FAIL"
    release(fleet)
    fleet.finish()
    trials = fleet.trials("elastic")
    assert {t.state for t in trials.values()} == {"COMPLETE"}
    ended = {x.trial: x.state for x in fleet.storage().leases.all("elastic") if x.worker == a_id}
    for n, step in handed.items():
        assert ended[n] == "WAITING", "a drained trial goes back to the queue"
        assert trials[n].worker == b_id
        log = (fleet.root / "runs" / "elastic" / f"trial-{n:04d}" / "log.txt").read_text()
        if 10 <= step < 80:  # it had a checkpoint and steps left when it was handed back
            assert "resumes from its checkpoint" in log
    state = next(w.state for w in fleet.storage().workers.all() if w.id == a_id)
    assert state == "stopped", "a drained worker deregisters"


def test_unschedulable_trials_are_reported_and_impossible_ones_refused(fleet: Fleet) -> None:
    big = deep_update(DIGITS, {"name": "big", "trial": {"resources": {"devices": 4},
                                                        "parallel": {"data": 4}}})  # fmt: skip
    path = fleet.sweep(big)
    fleet.submit(path)  # no worker yet: nothing to judge by
    w = fleet.start("small", "--devices", "cpu:2")
    w.id(fleet)
    status = cli("sweep", "status", "big", "--storage", fleet.storage_url)
    assert status.returncode == 0
    assert "unschedulable: trial.resources.devices: a trial needs 4 devices per node" in (
        status.stdout.replace("\n", " ")
    )
    again = cli("sweep", "submit", str(fleet.sweep({**big, "name": "big2"}, "big2.yaml")))
    assert again.returncode == 2
    lines = again.stderr.strip().splitlines()
    assert len(lines) == 1 and "largest live worker" in lines[0]
    import json

    listed = json.loads(cli("workers", "--storage", fleet.storage_url, "--json").stdout)
    assert [(x["worker"], x["devices"], x["state"]) for x in listed] == [
        (w.id(fleet), "cpu:0,cpu:1", "active")
    ]
