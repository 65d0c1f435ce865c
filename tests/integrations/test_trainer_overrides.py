"""The user's own Trainer arguments merged into what the callbacks set: Lightning's
``trainer_kwargs(**overrides)`` keeps the user's logger and callbacks (and adds its own), the
Transformers twin ``training_args(**overrides)`` keeps e.g. ``report_to``; an argument the trial
must control (its devices, nodes, strategy, length, precision, evaluation) is refused with one
line naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hyperfleet.errors import ConfigError
from hyperfleet.spec.trial import TrialConfig
from hyperfleet.trials.checkpoint import CheckpointManager
from hyperfleet.trials.context import TrialContext
from hyperfleet.trials.distributed import DistEnv


def context(root: Path, workload: str) -> TrialContext:
    trial = TrialConfig.model_validate({
        "workload": workload, "steps": 10, "eval_every": 5, "resources": {"devices": 0},
    })  # fmt: skip
    return TrialContext(
        params={"lr": 0.1}, env=DistEnv(0, 1, 0, torch.device("cpu"), "gloo"), max_steps=10,
        eval_every=5, trial_number=0, sweep="t", config=trial, workdir=root,
        checkpoints=CheckpointManager(root / "ck"),
    )  # fmt: skip


def test_lightning_keeps_the_users_logger_and_callbacks(tmp_path: Path) -> None:
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import LearningRateMonitor
    from lightning.pytorch.loggers import CSVLogger

    from hyperfleet.integrations.lightning import HyperfleetCallback

    cb = HyperfleetCallback(context(tmp_path, "tests.integrations.lightning_workloads:main"))
    mine, log = LearningRateMonitor(), CSVLogger(str(tmp_path / "csv"))
    trainer = pl.Trainer(
        max_steps=10, **cb.trainer_kwargs(logger=log, callbacks=[mine], enable_progress_bar=True)
    )
    assert trainer.logger is log
    assert mine in trainer.callbacks and cb in trainer.callbacks
    assert trainer.val_check_interval == 5  # the trial's cadence is kept
    assert trainer.strategy.checkpoint_io is cb.io  # and its checkpoints
    twice = cb.trainer_kwargs(callbacks=[cb, mine])["callbacks"]
    assert twice.count(cb) == 1  # already listed: not added again


@pytest.mark.parametrize(
    ("name", "value"),
    [("devices", 4), ("num_nodes", 2), ("strategy", "ddp"), ("precision", "16-mixed"),
     ("accumulate_grad_batches", 3), ("val_check_interval", 100)],
)  # fmt: skip
def test_lightning_refuses_what_the_trial_controls(
    tmp_path: Path, name: str, value: object
) -> None:
    from hyperfleet.integrations.lightning import HyperfleetCallback

    cb = HyperfleetCallback(context(tmp_path, "tests.integrations.lightning_workloads:main"))
    with pytest.raises(ConfigError, match=rf"^trainer_kwargs\({name}=.*the trial sets it") as err:
        cb.trainer_kwargs(**{name: value})
    assert "\n" not in str(err.value)


def test_transformers_keeps_the_users_arguments(tmp_path: Path) -> None:
    from transformers import TrainingArguments

    from hyperfleet.integrations.transformers import HyperfleetCallback

    cb = HyperfleetCallback(context(tmp_path, "examples.transformers.byte_gpt2:main"))
    args = cb.training_args(report_to="tensorboard", disable_tqdm=False, weight_decay=0.1)
    assert args["report_to"] == "tensorboard" and args["disable_tqdm"] is False
    assert args["weight_decay"] == 0.1 and args["max_steps"] == 10
    built = TrainingArguments(output_dir=cb.output_dir, **args)
    assert built.report_to == ["tensorboard"] and built.max_steps == 10


@pytest.mark.parametrize(
    ("name", "value"),
    [("max_steps", 100), ("gradient_accumulation_steps", 2), ("eval_strategy", "steps"),
     ("save_strategy", "steps"), ("fp16", True)],
)  # fmt: skip
def test_transformers_refuses_what_the_trial_controls(
    tmp_path: Path, name: str, value: object
) -> None:
    from hyperfleet.integrations.transformers import HyperfleetCallback

    cb = HyperfleetCallback(context(tmp_path, "examples.transformers.byte_gpt2:main"))
    with pytest.raises(ConfigError, match=rf"^training_args\({name}=.*the trial sets it") as err:
        cb.training_args(**{name: value})
    assert "\n" not in str(err.value)
