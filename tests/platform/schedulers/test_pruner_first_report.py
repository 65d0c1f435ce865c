"""A pruner's ``min_resource: auto`` is the step of a trial's first report: the first rung is
judged at the first report, the next one at a later report (not several rungs at once)."""

from __future__ import annotations

from typing import Any

import optuna
import pytest

from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.schedulers.optuna.samplers import build_pruner, first_report
from hyperfleet.platform.schedulers.optuna.scheduler import open_study
from hyperfleet.platform.schedulers.parsing import parse_pruner_config
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
        study = open_study(cfg, optuna.storages.InMemoryStorage(), create=True)
        assert [0] in _rungs_judged(study.pruner, 1), kind  # Hyperband: its first bracket
