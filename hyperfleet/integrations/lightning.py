"""A Lightning ``Trainer`` as a hyperfleet trial: one callback reports, prunes, checkpoints and
takes part in population-based training.

A workload (or a script trial's program) keeps its ``LightningModule`` and adds three things::

    from hyperfleet.integrations.lightning import HyperfleetCallback

    def main(ctx):
        cb = HyperfleetCallback(ctx)          # in a script trial: HyperfleetCallback()
        trainer = lightning.Trainer(callbacks=[cb], max_steps=ctx.max_steps,
                                    **cb.trainer_kwargs())
        trainer.fit(Model(lr=ctx.params["lr"]), datamodule=dm, ckpt_path=cb.ckpt_path)

What each does:

* **Reports.** After every validation run the callback reports the metrics Lightning collected
  (``self.log``: the validation's and the latest training values, one-element ones) at the
  trainer's ``global_step`` through ``ctx.report`` (collective: every rank calls it and every
  rank hears the decision). ``trainer_kwargs()`` validates every ``trial.eval_every`` optimizer
  steps.
* **Prunes.** A PRUNE decision raises ``TrialPruned`` out of ``trainer.fit`` on every rank at
  the same step; the workload lets it propagate and the trial ends PRUNED. An exploit or a
  pause (PBT) leaves ``fit`` the same way and the runtime handles it.
* **Checkpoints** go through Lightning's own ``trainer.save_checkpoint`` (its full state: model,
  optimizers, LR schedulers, loops, callbacks, precision) into the trial's checkpoint directory,
  at the reports ``trial.checkpoint.every`` makes due, written by the trial's checkpoint
  manager: atomic, checksummed, copied to the replica, the newest ``keep`` retained and the
  steps a PBT member will still load never pruned (:mod:`._lightning_parts`).
* **Resumes.** ``ckpt_path`` is the checkpoint the trial continues from (a requeued, interrupted
  or paused trial's own, a PBT member's donor's after an exploit), or None on a fresh start.
* **Explored values win.** After Lightning restored a checkpoint, the optimizers' and LR
  schedulers' hyperparameters are put back to what ``configure_optimizers`` built from this
  run's params (the schedule continues at its restored step from the new base values): after
  an exploit the member trains with its own explored learning rate, never its donor's.
* **Devices.** ``trainer_kwargs()`` maps the trial: its devices and ranks (inside a torchrun
  trial of ``devices: N`` Lightning's DDP joins the trial's process group; it launches
  nothing), ``precision`` (``bf16`` → ``bf16-mixed``, ``fp16`` → ``16-mixed``), ``grad_accum``,
  ``grad_clip``, and ``params["seed"]`` when the trial has one (``seed_everything``). It turns
  off what the trial does itself: Lightning's own ``ModelCheckpoint``, logger, progress bar
  and sanity validation.
* **Your own arguments.** ``trainer_kwargs(logger=my_logger, callbacks=[mine], ...)`` merges
  them: the user's logger, progress bar and other arguments win over these defaults, their
  callbacks are kept and this callback is added to them. An argument the trial controls
  (``devices``, ``num_nodes``, ``strategy``, ``precision``, ``accumulate_grad_batches``, ...:
  :data:`CONTROLLED`) is refused with one line naming it and the sweep file's field.

``lightning`` 2.x is an optional extra: ``pip install "hyperfleet[lightning]"``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

try:
    import lightning.pytorch as pl
except ImportError as exc:  # pragma: no cover - the extra is part of dev
    raise ImportError(
        'hyperfleet.integrations.lightning needs Lightning 2.x: pip install "hyperfleet[lightning]"'
    ) from exc

from lightning.pytorch.trainer.states import TrainerFn

from hyperfleet.errors import ConfigError
from hyperfleet.integrations._lightning_parts import (
    FreshHyperparameters,
    TrialCheckpointIO,
    devices_of,
    precision_of,
    scalar_metrics,
)
from hyperfleet.integrations._overrides import merge

if TYPE_CHECKING:
    from hyperfleet.trials.context import TrialContext

__all__ = ["HyperfleetCallback"]

logger = logging.getLogger(__name__)

_UNSET = object()

# what the trial sets, and where the sweep file sets it (a user's value for one is refused)
CONTROLLED = {
    "accelerator": "trial.resources.devices",
    "devices": "trial.resources.devices",
    "num_nodes": "trial.resources.nodes",
    "strategy": "trial.resources and trial.parallel",
    "precision": "trial.precision",
    "accumulate_grad_batches": "trial.grad_accum",
    "gradient_clip_val": "trial.grad_clip",
    "val_check_interval": "trial.eval_every",
    "check_val_every_n_epoch": "trial.eval_every",
    "plugins": "its checkpoint IO and cluster environment",
    "enable_checkpointing": "trial.checkpoint",
}


class HyperfleetCallback(pl.Callback):
    """Connects a Lightning ``Trainer`` to the trial ``ctx`` (see the module docstring).

    ``ctx``: the workload's context; None inside a script trial's program
    (``hyperfleet.trial()``). ``metrics``: report only these of Lightning's logged metrics
    (default: every one-element metric).
    """

    def __init__(
        self, ctx: TrialContext | None = None, *, metrics: Sequence[str] | None = None
    ) -> None:
        super().__init__()
        if ctx is None:
            import hyperfleet

            ctx = hyperfleet.trial()
        if ctx.pipelined:
            raise ConfigError(
                "trial.parallel.pipeline: the Lightning callback trains data-parallel only; "
                "set parallel.pipeline to 1"
            )
        self.ctx = ctx
        self.metrics = tuple(metrics) if metrics is not None else None
        self.io = TrialCheckpointIO()
        self._ckpt_path: Any = _UNSET
        self._fresh: FreshHyperparameters | None = None

    # -- what the user passes to Lightning -------------------------------------------------

    @property
    def ckpt_path(self) -> str | None:
        """The checkpoint to resume from (``trainer.fit(..., ckpt_path=cb.ckpt_path)``), or
        None on a fresh start. Read once (every rank reads the step rank 0 chose)."""
        if self._ckpt_path is _UNSET:
            state = self.ctx.load_checkpoint()
            step = self.ctx.resumed_from
            if state is None or step is None:
                self._ckpt_path = None
            else:
                path = str(self.ctx.checkpoints.path(step))
                self.io.offer(path, state)
                self._ckpt_path = path
        return self._ckpt_path

    def trainer_kwargs(self, **overrides: Any) -> dict[str, Any]:
        """``lightning.Trainer`` arguments for this trial (see the module docstring), with the
        user's own ``overrides`` merged in: ``trainer_kwargs(logger=mine, callbacks=[...])``
        keeps their logger and callbacks (this callback added to them); an argument the trial
        controls (devices, nodes, strategy, precision, cadence) is refused, naming it."""
        cfg = self.ctx.config
        if "seed" in self.ctx.params:
            pl.seed_everything(int(self.ctx.params["seed"]), workers=True, verbose=False)
        devices = devices_of(self.ctx)
        env = devices.pop("env")
        ours = {
            **devices,
            "precision": precision_of(self.ctx),
            "accumulate_grad_batches": cfg.grad_accum,
            "gradient_clip_val": cfg.grad_clip,
            "val_check_interval": self.ctx.eval_every * cfg.grad_accum,
            "check_val_every_n_epoch": None,
            "num_sanity_val_steps": 0,
            "plugins": [self.io, env],
            "enable_checkpointing": False,
            "logger": False,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "default_root_dir": str(self.ctx.workdir),
        }
        return merge("trainer_kwargs", ours, overrides, CONTROLLED, callback=self)

    # -- Lightning's hooks ---------------------------------------------------------------

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if trainer.strategy.checkpoint_io is not self.io:
            raise ConfigError(
                "HyperfleetCallback: the Trainer does not write the trial's checkpoints; pass "
                "**callback.trainer_kwargs() to lightning.Trainer"
            )

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # the optimizers are built from this run's params; a checkpoint is restored after this
        self._fresh = FreshHyperparameters(trainer)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.io.offered:
            raise ConfigError(
                f"the trial continues from its checkpoint at step {self.ctx.resumed_from} but "
                f"trainer.fit did not load it: pass ckpt_path=callback.ckpt_path to trainer.fit"
            )
        if self._ckpt_path not in (None, _UNSET) and self._fresh is not None:
            self._fresh.apply(trainer)
            logger.info(
                "trial %s continues at step %d with its own hyperparameters",
                self.ctx.trial_number,
                trainer.global_step,
            )

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING:
            return
        step = trainer.global_step
        metrics = scalar_metrics(dict(trainer.callback_metrics), self.metrics)
        checkpoint = None
        if self.ctx.checkpoint_due(step):
            path = self.ctx.checkpoints.path(step)
            self.io.expect(path)
            trainer.save_checkpoint(path)  # collective; rank 0's dict is kept, not written
            checkpoint = self.io.take()
        self.ctx.report(step, metrics, checkpoint=checkpoint)
