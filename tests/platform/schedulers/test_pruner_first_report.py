"""A pruner's ``min_resource: auto`` is the step of a trial's first report: the first rung is
judged at the first report, the next one at a later report (not several rungs at once)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.config.scheduler_parsing import parse_pruner_config
from hyperfleet.platform.schedulers.optuna.samplers import build_pruner, first_report
from hyperfleet.platform.schedulers.optuna.scheduler import open_study
from hyperfleet.testing.sweeps import minimal_sweep

EVERY, STEPS = 25, 300


def _rungs_judged(pruner: optuna.pruners.BasePruner, reports: int) -> list[list[int]]:
    """Eight trials reporting a curve every ``EVERY`` steps (better for higher trial numbers,
    so each new trial is promoted): the rungs each report judged (Optuna records a completed
    rung as the trial's system attribute ``completed_rung_<k>``)."""
    study = optuna.create_study(pruner=pruner)
    judged: list[list[int]] = []
    for n in range(8):
        trial = study.ask()
        before: set[str] = set()
        for step in range(EVERY, EVERY * (reports + 1), EVERY):
            trial.report(10.0 - n - step / STEPS, step)
            pruned = trial.should_prune()
            attrs = set(study.trials[n].system_attrs)
            judged.append(sorted(int(a.rsplit("_", 1)[1]) for a in attrs - before
                                 if a.startswith("completed_rung_")))  # fmt: skip
            before = attrs
            if pruned:
                break
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    return judged


@pytest.mark.parametrize("kind", ["asha", "hyperband"])
def test_auto_min_resource_judges_one_rung_per_report(kind: str) -> None:
    """No trial completes here: Hyperband's max_resource comes from the trial's steps, not
    from a finished trial, so it prunes from the first report too."""
    raw: dict[str, Any] = {"type": kind}
    pruner = build_pruner(parse_pruner_config(raw), first_report=EVERY, last_step=STEPS)
    judged = _rungs_judged(pruner, 4)
    assert all(len(rungs) <= 1 for rungs in judged)
    assert [0] in judged  # the first rung: at a trial's first report
    if kind == "asha":  # one bracket: rung 1 at step 4 * 25, the fourth report
        assert [1] in judged


def test_an_integer_min_resource_is_kept() -> None:
    """Optuna's rule as before: min_resource 3 puts rungs 0 and 1 (steps 3, 12) before the
    first report at 25, both judged there."""
    raw = {"type": "asha", "min_resource": 3}
    judged = _rungs_judged(build_pruner(parse_pruner_config(raw), first_report=EVERY), 1)
    assert [0, 1] in judged


def test_a_sweeps_pruner_starts_at_its_trials_first_report() -> None:
    trial = {"steps": STEPS, "eval_every": EVERY}
    short = SweepConfig.model_validate(minimal_sweep(trial={"steps": 10, "eval_every": 50}))
    assert first_report(short.trial) == 10  # a trial shorter than eval_every reports at its end
    for kind in ("asha", "hyperband"):
        cfg = SweepConfig.model_validate(minimal_sweep(pruner={"type": kind}, trial=trial))
        assert first_report(cfg.trial) == EVERY
        pruner = build_pruner(cfg.pruner, first_report(cfg.trial), cfg.trial.steps)
        study = open_study(
            cfg.name, optuna.storages.InMemoryStorage(), cfg.scheduler, space=cfg.space,
            modes=["min"], trials=cfg.budget.trials, pruner=pruner, create=True,
        )  # fmt: skip
        assert [0] in _rungs_judged(study.pruner, 1), kind  # Hyperband: its first bracket


@pytest.mark.parametrize("kind", ["asha", "hyperband"])
def test_a_trial_that_reaches_its_last_step_completes(kind: str, tmp_path: Path) -> None:
    """The quickstart's numbers (200 steps, a report every 50, ASHA's reduction factor 4):
    ASHA's second rung falls at step 200, the trials' last. Eight trials, each the best so
    far at every report but its last and the worst there, through the scheduler the platform
    builds on its SQLite storage: every trial reports step 200, and completes with its value
    (before the fix, the trials after the first ended PRUNED there)."""
    from hyperfleet.platform.config import load_sweep
    from hyperfleet.platform.schedulers import TrialState, build_scheduler
    from hyperfleet.platform.storage import Storage

    root = Path(__file__).resolve().parents[3]
    url = f"sqlite:///{tmp_path / 's.db'}"
    cfg = load_sweep(root / "examples" / "quickstart.yaml")
    cfg = cfg.model_copy(update={"storage": url, "pruner": parse_pruner_config({"type": kind})})
    storage = Storage(url)
    storage.sweeps.create(cfg.name, cfg.model_dump(mode="json"))
    sched = build_scheduler(cfg, storage, create=True)
    steps, every = cfg.trial.steps, cfg.trial.eval_every
    ended = {}
    for n in range(8):
        s = sched.suggest()
        assert s is not None
        state = TrialState.COMPLETE
        for step in range(every, steps + 1, every):
            # maximised: each trial the best so far until its last step, then the worst
            accuracy = 0.9 - 0.05 * n if step == steps else 0.5 + 0.05 * n + step / 10_000
            sched.report(s.trial_number, step, {"val_accuracy": accuracy})
            if sched.decide(s.trial_number, step).kind.value == "prune":
                state = TrialState.PRUNED
                break
        ended[s.trial_number] = (state, step)
        sched.on_trial_end(
            s.trial_number, state, [accuracy] if state is TrialState.COMPLETE else None
        )
    assert ended == {n: (TrialState.COMPLETE, steps) for n in range(8)}
