"""The scheduler contract, checked for every scheduler type the platform builds (on SQLite;
the population schedulers, whose store is the platform's own SQL, on PostgreSQL too, through
the real server fixture): reports are idempotent,
decisions repeatable, a requeued trial is suggested again, a FAIL doesn't stop the sweep,
``finished`` agrees with the budget, and a scheduler rebuilt from storage decides the same.

Schedulers are built as the controller builds them (``build_scheduler`` on a validated sweep
and its storage); nothing runs but the scheduler.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from hyperfleet.platform.config import SweepConfig, parse_sweep
from hyperfleet.platform.schedulers import Decision, Scheduler, TrialState, build_scheduler
from hyperfleet.platform.schedulers.pbt.pinning import PinsCheckpoints
from hyperfleet.platform.storage import Storage

OPTUNA_KINDS = ["tpe", "random", "grid", "cmaes", "qmc", "gp", "skopt", "nsga2"]
POPULATION_KINDS = ["pbt", "pb2"]
STEPS = 8


def sweep(kind: str, url: str) -> SweepConfig:
    population = kind in POPULATION_KINDS
    scheduler: dict[str, Any] = {"type": kind, "seed": 0}
    if population:
        scheduler.update(population=4, perturbation_interval=2)
    return parse_sweep(
        {
            "name": f"contract-{kind}",
            "objective": {"metric": "loss", "mode": "min"},
            "scheduler": scheduler,
            "pruner": {"type": "none"} if population else {"type": "median", "n_startup_trials": 1},
            "budget": {"max_concurrent": 2} if population else {"trials": 6, "max_concurrent": 2},
            "space": {
                "x": {"type": "float", "low": 0.0, "high": 1.0, "step": 0.25},
                "c": {"type": "categorical", "choices": ["a", "b"]},
            },
            "trial": {
                "workload": "tests.integration.workloads:quadratic",
                "steps": STEPS,
                "eval_every": 2,
                "resources": {"devices": 0},
            },
            "storage": url,
        }
    )


CASES = [(k, "sqlite") for k in OPTUNA_KINDS + POPULATION_KINDS] + [
    (k, "postgresql")
    for k in POPULATION_KINDS  # the population store's SQL on both backends
]


@pytest.fixture(params=CASES, ids=[f"{k}-{b}" for k, b in CASES])
def built(request: pytest.FixtureRequest, tmp_path: Any) -> tuple[SweepConfig, Storage, Scheduler]:
    kind, backend = request.param
    if backend == "sqlite":
        db_url = f"sqlite:///{tmp_path / 'store.db'}"
    else:
        db_url = request.getfixturevalue("postgres_url")
    cfg = sweep(kind, db_url)
    storage = Storage(db_url)
    storage.create_sweep(cfg.name, cfg.model_dump(mode="json"))
    return cfg, storage, build_scheduler(cfg, storage, create=True)


def loss(params: Any, step: int) -> float:
    return (float(params["x"]) - 0.3) ** 2 + (0.1 if params["c"] == "a" else 0.0) + 1.0 / step


def snapshot(cfg: SweepConfig, storage: Storage) -> Any:
    """Everything the scheduler keeps in storage, without timestamps."""
    if cfg.is_population:
        from hyperfleet.platform.storage.population import SqlPopulationStore

        store = SqlPopulationStore(storage.engine)
        members = {
            n: {k: v for k, v in dataclasses.asdict(m).items() if k != "updated"}
            for n, m in store.members(cfg.name).items()
        }
        return members, [(e.member, e.generation, e.kind) for e in store.lineage(cfg.name)]
    import optuna

    study = optuna.load_study(study_name=cfg.name, storage=storage.optuna)
    return [
        (t.number, t.state, t.params, t.intermediate_values, t.values)
        for t in study.get_trials(deepcopy=False)
    ]


def test_report_is_idempotent(built: Any) -> None:
    cfg, storage, sched = built
    s = sched.suggest()
    assert s is not None
    sched.report(s.trial_number, 2, {"loss": loss(s.params, 2)})
    before = snapshot(cfg, storage)
    sched.report(s.trial_number, 2, {"loss": loss(s.params, 2)})
    assert snapshot(cfg, storage) == before


def test_decide_is_repeatable(built: Any) -> None:
    cfg, storage, sched = built
    trials = [sched.suggest(), sched.suggest()]
    for step in (2, 4):
        for s in trials:
            assert s is not None
            sched.report(s.trial_number, step, {"loss": loss(s.params, step)})
            first = sched.decide(s.trial_number, step)
            after_first = snapshot(cfg, storage)
            assert sched.decide(s.trial_number, step) == first
            assert snapshot(cfg, storage) == after_first, "a repeated decide changes nothing"


def test_requeue_then_suggest_returns_the_same_trial(built: Any) -> None:
    _, _, sched = built
    s = sched.suggest()
    assert s is not None
    sched.report(s.trial_number, 2, {"loss": loss(s.params, 2)})
    sched.requeue(s.trial_number)
    again = sched.suggest()
    assert again is not None
    assert again.trial_number == s.trial_number and dict(again.params) == dict(s.params)


def test_a_failed_trial_does_not_stop_the_sweep(built: Any) -> None:
    _, _, sched = built
    s = sched.suggest()
    assert s is not None
    sched.on_trial_end(s.trial_number, TrialState.FAIL, None, "boom")
    assert not sched.finished()
    assert sched.suggest() is not None


def run_to_the_end(cfg: SweepConfig, sched: Scheduler) -> list[int]:
    """Drive the scheduler as the controller would, two trials at a time; launch order."""
    launched: list[int] = []
    running: dict[int, tuple[Any, int]] = {}
    for _ in range(500):
        while len(running) < cfg.budget.max_concurrent:
            s = sched.suggest()
            if s is None:
                break
            launched.append(s.trial_number)
            start = (s.restore.step or 0) if s.restore is not None else 0
            running[s.trial_number] = (dict(s.params), start)
        if not running:
            break
        number = min(running)
        params, step = running.pop(number)
        state, paused = TrialState.COMPLETE, False
        for step in range(step + 2, STEPS + 1, 2):  # noqa: B020 - continue from the start step
            sched.report(number, step, {"loss": loss(params, step)})
            d = sched.decide(number, step)
            if d.kind.value == "prune":
                state = TrialState.PRUNED
                break
            if d.kind.value == "pause":
                paused = True
                break
            if d.kind.value == "exploit":
                params = dict(d.params or {})
        values = None if state is not TrialState.COMPLETE else [loss(params, STEPS)]
        sched.on_trial_end(number, state, values)
        if paused:
            continue
    return launched


def test_finished_agrees_with_the_budget(built: Any) -> None:
    cfg, _, sched = built
    assert not sched.finished()
    launched = run_to_the_end(cfg, sched)
    assert sched.finished()
    assert sched.suggest() is None
    if cfg.is_population:
        assert set(launched) == set(range(cfg.scheduler.population))
        assert all(m.step == STEPS for m in sched.members().values())  # type: ignore[attr-defined]
    else:
        assert len(set(launched)) == cfg.budget.trials
        assert sched.budget_left() == 0


def test_a_rebuilt_scheduler_decides_the_same(built: Any) -> None:
    """A scheduler built from the same storage (as in another process: a trial's rank 0,
    another worker) answers every decision the same and continues the suggestions."""
    cfg, storage, sched = built
    rebuilt = build_scheduler(cfg, Storage(storage.url, create=False))
    trials = [sched.suggest() for _ in range(2)]
    for step in (2, 4, 6):
        for s in trials:
            assert s is not None
            sched.report(s.trial_number, step, {"loss": loss(s.params, step)})
            assert rebuilt.decide(s.trial_number, step) == sched.decide(s.trial_number, step)
    nxt = rebuilt.suggest()
    assert nxt is not None
    assert nxt.trial_number not in {s.trial_number for s in trials if s is not None}


def _report_and_decide(
    sched: Scheduler, number: int, step: int, metrics: dict[str, float]
) -> tuple[Decision, set[tuple[int, int]] | None]:
    """The recorder's call: with the pinned checkpoints, from a scheduler that pins some."""
    if isinstance(sched, PinsCheckpoints):
        return sched.report_decide_and_pin(number, step, metrics)
    return sched.report_and_decide(number, step, metrics), None


def test_report_and_decide_is_report_then_decide(built: Any, tmp_path: Any) -> None:
    """The recorder's one call per report leaves the same state and decisions as ``report``
    then ``decide`` on a twin scheduler, repeating it changes nothing, and the pinned
    checkpoints it returns (if any) are those the store holds."""
    cfg, storage, sched = built
    twin_url = f"sqlite:///{tmp_path / 'twin.db'}"
    twin_cfg = cfg.model_copy(update={"storage": twin_url})
    twin_storage = Storage(twin_url)
    twin_storage.create_sweep(cfg.name, cfg.model_dump(mode="json"))
    twin = build_scheduler(twin_cfg, twin_storage, create=True)
    pairs = [(sched.suggest(), twin.suggest()) for _ in range(2)]
    for step in (2, 4, 6):
        for s, t in pairs:
            assert s is not None and t is not None and s.trial_number == t.trial_number
            metrics = {"loss": loss(s.params, step)}
            decision, pinned = _report_and_decide(sched, s.trial_number, step, metrics)
            twin.report(t.trial_number, step, metrics)
            assert decision == twin.decide(t.trial_number, step)
            after = snapshot(cfg, storage)
            assert after == snapshot(twin_cfg, twin_storage)
            if isinstance(sched, PinsCheckpoints):
                assert pinned == sched.pinned_checkpoints()
            again = _report_and_decide(sched, s.trial_number, step, metrics)
            assert again == (decision, pinned)
            assert snapshot(cfg, storage) == after
