"""The scheduler contract as a reusable test suite (needs pytest: the ``dev`` extra).

Every scheduler keeps its state in storage and returns data (``platform.schedulers.base``); the
controller, a trial's rank 0 and another host's worker each rebuild it and must agree. The
suite checks what they rely on: reports are idempotent, decisions repeatable, a requeued trial
is suggested again, a FAIL doesn't stop the sweep, ``finished`` agrees with the budget, a
scheduler rebuilt from storage decides the same, and ``report_and_decide`` is ``report`` then
``decide``. Nothing runs but the scheduler: the suite drives it as the controller would, with
``loss`` (minimised) of :func:`loss` over :data:`SPACE`, reported every 2 steps up to
:data:`STEPS`.

To check a scheduler, subclass :class:`SchedulerContract` in a test module (the name must start
with ``Test``) and say which scheduler it is::

    from hyperfleet.testing.schedulers import SchedulerContract

    class TestMyScheduler(SchedulerContract):
        def build(self, cfg, storage, create=False):
            return MyScheduler(cfg, storage, create=create)

``build`` gets the contract's sweep (:func:`contract_sweep`: its ``sections`` fixture gives the
``scheduler``, ``pruner`` and ``budget`` sections) and a :class:`~hyperfleet.platform.storage.
Storage` holding it; the default is the platform's ``build_scheduler``. Override ``snapshot``
when the scheduler keeps its state outside an Optuna study, ``expected_trials`` when the
budget is not ``budget.trials``, and the ``storage_url`` fixture to test on another database.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from hyperfleet.platform.config import SweepConfig, parse_sweep
from hyperfleet.platform.schedulers import (
    Decision,
    Pinned,
    PinsCheckpoints,
    Scheduler,
    TrialState,
    build_scheduler,
)
from hyperfleet.platform.storage import Storage
from hyperfleet.testing.sweeps import minimal_sweep

__all__ = [
    "SPACE",
    "STEPS",
    "Built",
    "SchedulerContract",
    "contract_sweep",
    "loss",
    "run_to_the_end",
]

STEPS = 8
SPACE: Mapping[str, Any] = {
    "x": {"type": "float", "low": 0.0, "high": 1.0, "step": 0.25},
    "c": {"type": "categorical", "choices": ["a", "b"]},
}


def contract_sweep(sections: Mapping[str, Any], url: str) -> SweepConfig:
    """The sweep the suite drives, stored at ``url``: ``sections`` (``scheduler``, ``pruner``,
    ``budget``, and ``name``) over :data:`SPACE`, :data:`STEPS` steps, a report every 2."""
    trial = {"steps": STEPS, "eval_every": 2}
    return parse_sweep(minimal_sweep(space=SPACE, trial=trial, storage=url, **sections))


def loss(params: Mapping[str, Any], step: int) -> float:
    """The reported loss: lowest at ``x = 0.3, c = "b"``, falling with every step."""
    return (float(params["x"]) - 0.3) ** 2 + (0.1 if params["c"] == "a" else 0.0) + 1.0 / step


@dataclasses.dataclass
class Built:
    """A scheduler the suite drives, the sweep it was built for and its storage."""

    cfg: SweepConfig
    storage: Storage
    scheduler: Scheduler


def run_to_the_end(cfg: SweepConfig, sched: Scheduler) -> list[int]:
    """Drive the scheduler as the controller would, ``max_concurrent`` trials at a time, each
    to :data:`STEPS` unless pruned or paused; the trial numbers in launch order."""
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
        state = TrialState.COMPLETE
        for step in range(step + 2, STEPS + 1, 2):  # noqa: B020 - continue from the start step
            sched.report(number, step, {"loss": loss(params, step)})
            d = sched.decide(number, step)
            if d.kind.value == "prune":
                state = TrialState.PRUNED
                break
            if d.kind.value == "pause":  # ends as it is; resumed, it is suggested again
                break
            if d.kind.value == "exploit":
                params = dict(d.params or {})
        values = None if state is not TrialState.COMPLETE else [loss(params, STEPS)]
        sched.on_trial_end(number, state, values)
    return launched


class SchedulerContract:
    """The contract's tests; subclass it (see the module docstring) and override what differs."""

    def build(self, cfg: SweepConfig, storage: Storage, create: bool = False) -> Scheduler:
        """The scheduler of ``cfg`` on ``storage`` (``create``: a new sweep), as every process
        builds it; called again on the same storage for a rebuilt scheduler."""
        return build_scheduler(cfg, storage, create=create)

    def snapshot(self, cfg: SweepConfig, storage: Storage) -> Any:
        """Everything the scheduler keeps in storage, without timestamps, comparable with
        ``==`` (default: the trials of the sweep's Optuna study)."""
        import optuna

        study = optuna.load_study(study_name=cfg.name, storage=storage.optuna)
        return [
            (t.number, t.state, t.params, t.intermediate_values, t.values)
            for t in study.get_trials(deepcopy=False)
        ]

    def check_the_end(self, built: Built, launched: list[int]) -> None:
        """What the budget says of a sweep driven to its end (``launched``: trial numbers in
        launch order); default: ``budget.trials`` distinct trials ran, none is left."""
        assert len(set(launched)) == built.cfg.budget.trials
        assert built.scheduler.budget_left() == 0

    @pytest.fixture
    def sections(self) -> Mapping[str, Any]:
        """The sweep's ``name``, ``scheduler``, ``pruner`` and ``budget`` (may be parametrised)."""
        return {"name": "contract", "budget": {"trials": 6, "max_concurrent": 2}}

    @pytest.fixture
    def storage_url(self, tmp_path: Path) -> str:
        """Where the scheduler keeps its state (default: a SQLite file)."""
        return f"sqlite:///{tmp_path / 'store.db'}"

    @pytest.fixture
    def built(self, sections: Mapping[str, Any], storage_url: str) -> Built:
        cfg = contract_sweep(sections, storage_url)
        storage = Storage(storage_url)
        storage.sweeps.create(cfg.name, cfg.model_dump(mode="json"))
        return Built(cfg, storage, self.build(cfg, storage, create=True))

    def test_report_is_idempotent(self, built: Built) -> None:
        cfg, storage, sched = built.cfg, built.storage, built.scheduler
        s = sched.suggest()
        assert s is not None
        sched.report(s.trial_number, 2, {"loss": loss(s.params, 2)})
        before = self.snapshot(cfg, storage)
        sched.report(s.trial_number, 2, {"loss": loss(s.params, 2)})
        assert self.snapshot(cfg, storage) == before

    def test_decide_is_repeatable(self, built: Built) -> None:
        cfg, storage, sched = built.cfg, built.storage, built.scheduler
        trials = [sched.suggest(), sched.suggest()]
        for step in (2, 4):
            for s in trials:
                assert s is not None
                sched.report(s.trial_number, step, {"loss": loss(s.params, step)})
                first = sched.decide(s.trial_number, step)
                after_first = self.snapshot(cfg, storage)
                assert sched.decide(s.trial_number, step) == first
                assert self.snapshot(cfg, storage) == after_first, (
                    "a repeated decide changes nothing"
                )

    def test_requeue_then_suggest_returns_the_same_trial(self, built: Built) -> None:
        sched = built.scheduler
        s = sched.suggest()
        assert s is not None
        sched.report(s.trial_number, 2, {"loss": loss(s.params, 2)})
        sched.requeue(s.trial_number)
        again = sched.suggest()
        assert again is not None
        assert again.trial_number == s.trial_number and dict(again.params) == dict(s.params)

    def test_a_late_requeue_of_an_ended_trial_changes_nothing(self, built: Built) -> None:
        """A worker frozen while its trial's copy ran to its end requeues it when it wakes:
        the trial stays ended (no error, nothing reopened)."""
        cfg, storage, sched = built.cfg, built.storage, built.scheduler
        s = sched.suggest()
        assert s is not None
        sched.report(s.trial_number, 2, {"loss": loss(s.params, 2)})
        sched.on_trial_end(s.trial_number, TrialState.COMPLETE, [loss(s.params, 2)], None)
        before = self.snapshot(cfg, storage)
        sched.requeue(s.trial_number)
        assert self.snapshot(cfg, storage) == before

    def test_a_failed_trial_does_not_stop_the_sweep(self, built: Built) -> None:
        sched = built.scheduler
        s = sched.suggest()
        assert s is not None
        sched.on_trial_end(s.trial_number, TrialState.FAIL, None, "boom")
        assert not sched.finished()
        assert sched.suggest() is not None

    def test_finished_agrees_with_the_budget(self, built: Built) -> None:
        sched = built.scheduler
        assert not sched.finished()
        launched = run_to_the_end(built.cfg, sched)
        assert sched.finished()
        assert sched.suggest() is None
        self.check_the_end(built, launched)

    def test_a_report_at_the_last_step_is_never_pruned(self, built: Built) -> None:
        """A trial that trained to its last step (:data:`STEPS`) is a finished result: its
        report there never prunes it, however bad the value (a pruner's rung or median that
        falls at the last step would end it PRUNED, its value lost). The first trial reports
        its curve and completes; each later one reports once, at its last step, far worse."""
        sched = built.scheduler
        first = sched.suggest()
        assert first is not None
        for step in range(2, STEPS + 1, 2):
            sched.report(first.trial_number, step, {"loss": loss(first.params, step)})
            assert sched.decide(first.trial_number, step).kind.value == "continue"
        sched.on_trial_end(first.trial_number, TrialState.COMPLETE, [loss(first.params, STEPS)])
        for _ in range(2):
            s = sched.suggest()
            assert s is not None
            sched.report(s.trial_number, STEPS, {"loss": 1e6})
            assert sched.decide(s.trial_number, STEPS).kind.value != "prune"
            sched.on_trial_end(s.trial_number, TrialState.COMPLETE, [1e6])

    def test_a_rebuilt_scheduler_decides_the_same(self, built: Built) -> None:
        """A scheduler built from the same storage (as in another process: a trial's rank 0,
        another worker) answers every decision the same and continues the suggestions."""
        cfg, storage, sched = built.cfg, built.storage, built.scheduler
        rebuilt = self.build(cfg, Storage(storage.url, create=False))
        trials = [sched.suggest() for _ in range(2)]
        for step in (2, 4, 6):
            for s in trials:
                assert s is not None
                sched.report(s.trial_number, step, {"loss": loss(s.params, step)})
                assert rebuilt.decide(s.trial_number, step) == sched.decide(s.trial_number, step)
        nxt = rebuilt.suggest()
        assert nxt is not None
        assert nxt.trial_number not in {s.trial_number for s in trials if s is not None}

    def test_report_and_decide_is_report_then_decide(self, built: Built, tmp_path: Path) -> None:
        """The recorder's one call per report leaves the same state and decisions as
        ``report`` then ``decide`` on a twin scheduler, repeating it changes nothing, and the
        pinned checkpoints it returns (if any) are those the store holds."""
        cfg, storage, sched = built.cfg, built.storage, built.scheduler
        twin_url = f"sqlite:///{tmp_path / 'twin.db'}"
        twin_cfg = cfg.model_copy(update={"storage": twin_url})
        twin_storage = Storage(twin_url)
        twin_storage.sweeps.create(cfg.name, cfg.model_dump(mode="json"))
        twin = self.build(twin_cfg, twin_storage, create=True)
        pairs = [(sched.suggest(), twin.suggest()) for _ in range(2)]
        for step in (2, 4, 6):
            for s, t in pairs:
                assert s is not None and t is not None and s.trial_number == t.trial_number
                metrics = {"loss": loss(s.params, step)}
                decision, pinned = _report_and_decide(sched, s.trial_number, step, metrics)
                twin.report(t.trial_number, step, metrics)
                assert decision == twin.decide(t.trial_number, step)
                after = self.snapshot(cfg, storage)
                assert after == self.snapshot(twin_cfg, twin_storage)
                if isinstance(sched, PinsCheckpoints):
                    assert pinned == sched.pinned_checkpoints()
                again = _report_and_decide(sched, s.trial_number, step, metrics)
                assert again == (decision, pinned)
                assert self.snapshot(cfg, storage) == after


def _report_and_decide(
    sched: Scheduler, number: int, step: int, metrics: dict[str, float]
) -> tuple[Decision, Pinned | None]:
    """The recorder's call: with the pinned checkpoints, from a scheduler that pins some."""
    if isinstance(sched, PinsCheckpoints):
        return sched.report_decide_and_pin(number, step, metrics)
    return sched.report_and_decide(number, step, metrics), None
