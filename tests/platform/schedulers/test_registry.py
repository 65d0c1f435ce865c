"""The one table of schedulers (``schedulers/registry.py``): every scheduler configuration the
sweep file accepts has a row, each row builds its kind of scheduler, and a configuration
without a row is one line naming the table. ``OptunaScheduler`` takes its own inputs: built
here from a study and a space, with no sweep file."""

from __future__ import annotations

import typing
from pathlib import Path

import optuna
import pytest

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config import parse_sweep
from hyperfleet.platform.config.model import AnyScheduler
from hyperfleet.platform.config.space import FloatParam
from hyperfleet.platform.schedulers import SCHEDULERS, build_scheduler, registry
from hyperfleet.platform.schedulers.optuna.samplers import SAMPLERS
from hyperfleet.platform.schedulers.optuna.scheduler import OptunaScheduler
from hyperfleet.platform.schedulers.pbt.pb2 import PB2Scheduler
from hyperfleet.platform.schedulers.pbt.scheduler import PBTScheduler
from hyperfleet.platform.schedulers.registry import OPTUNA_CONFIGS, resolve
from hyperfleet.platform.storage import Storage
from hyperfleet.spec.wire import DecisionKind
from hyperfleet.testing.sweeps import minimal_sweep


def test_every_scheduler_configuration_of_the_sweep_file_has_a_row() -> None:
    accepted = set(typing.get_args(typing.get_args(AnyScheduler)[0]))
    assert len(accepted) >= 10
    assert accepted == set(SCHEDULERS), "a configuration class without a row, or a row too many"
    assert set(OPTUNA_CONFIGS) == set(SAMPLERS), "an Optuna-based configuration without a sampler"


def test_every_row_names_a_builder_of_the_schedulers_package() -> None:
    """The table is in ``config/`` (validating a file loads no scheduling code), so its rows
    name their builders by path: each one imports, and each is in ``schedulers/``."""
    for config, row in SCHEDULERS.items():
        assert isinstance(row, str) and row.startswith("hyperfleet.platform.schedulers."), config
        assert callable(resolve(row)), row


@pytest.mark.parametrize(
    ("scheduler", "built"),
    [
        ({"type": "tpe", "seed": 0}, OptunaScheduler),
        ({"type": "random", "seed": 0}, OptunaScheduler),
        ({"type": "pbt", "population": 2, "perturbation_interval": 2}, PBTScheduler),
        ({"type": "pb2", "population": 2, "perturbation_interval": 2}, PB2Scheduler),
    ],
)
def test_each_row_builds_its_scheduler(
    tmp_path: Path, scheduler: dict[str, typing.Any], built: type
) -> None:
    budget = {"trials": None} if scheduler["type"] in ("pbt", "pb2") else {"trials": 3}
    cfg = parse_sweep(minimal_sweep(name="r", scheduler=scheduler, budget=budget))
    storage = Storage(f"sqlite:///{tmp_path / 'hf.db'}")
    try:
        assert type(build_scheduler(cfg, storage, create=True)) is built
    finally:
        storage.close()


def test_a_configuration_without_a_row_is_one_line_naming_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = parse_sweep(minimal_sweep(name="r"))
    without = {
        config: row for config, row in SCHEDULERS.items() if config is not type(cfg.scheduler)
    }
    monkeypatch.setattr(registry, "SCHEDULERS", without)  # the sweep file's union left as it is
    storage = Storage(f"sqlite:///{tmp_path / 'hf.db'}")
    try:
        with pytest.raises(ConfigError, match=r"scheduler\.type: 'random'.*registry\.py"):
            build_scheduler(cfg, storage, create=True)
    finally:
        storage.close()


def test_optuna_scheduler_takes_its_own_inputs() -> None:
    """A study, a space, the objective's metric, the trial's steps and the budget: enough to
    suggest, prune and count, with no ``SweepConfig`` anywhere."""
    from hyperfleet.platform.config.schedulers import RandomConfig

    study = optuna.create_study(study_name="own", pruner=optuna.pruners.ThresholdPruner(upper=1.0))
    sched = OptunaScheduler(
        RandomConfig(type="random", seed=0),
        study,
        space={"x": FloatParam(type="float", low=0.0, high=2.0)},
        metrics=["loss"],
        steps=10,
        trials=2,
        pruner="threshold",
    )
    first = sched.suggest()
    assert first is not None and 0.0 <= first.params["x"] <= 2.0
    sched.report(first.trial_number, 3, {"loss": 5.0})
    decision = sched.decide(first.trial_number, 3)
    assert decision.kind is DecisionKind.PRUNE
    assert decision.reason == "pruned by threshold at step 3"
    sched.report(first.trial_number, 10, {"loss": 5.0})
    assert sched.decide(first.trial_number, 10).kind is DecisionKind.CONTINUE, "the last step"
    assert sched.budget_left() == 1
    second = sched.suggest()
    assert second is not None and sched.suggest() is None, "two trials in the budget"
    with pytest.raises(ConfigError, match=r"budget\.trials: sweep 'own' already has 2 of its 2"):
        sched.enqueue({"x": 1.0})
