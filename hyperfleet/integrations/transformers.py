"""Hugging Face Transformers trials: a ``transformers.Trainer`` reports, is pruned, checkpoints
and takes part in PBT through :class:`HyperfleetCallback`.

The shape a workload writes::

    def main(ctx):
        cb = HyperfleetCallback(ctx)          # in a script trial: HyperfleetCallback()
        args = TrainingArguments(output_dir=cb.output_dir, learning_rate=ctx.params["lr"],
                                 per_device_train_batch_size=8, **cb.training_args())
        trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=val,
                          callbacks=[cb])
        trainer.train(resume_from_checkpoint=cb.ckpt_path)

How the Trainer's own machinery is driven:

* **Reports.** At every ``ctx.should_eval`` step (``trial.eval_every`` and the last) the callback
  sets ``control.should_evaluate``; the Trainer evaluates on every rank and hands the metrics
  (``eval_loss``, ...) to ``on_evaluate``; the callback reports them at the Trainer's
  ``global_step`` (``ctx.report``, collective, so every rank hears the same decision).
* **Checkpoints.** At a report step where the trial's checkpoint is due (``checkpoint.every``)
  the callback also sets ``control.should_save``: the Trainer writes its usual
  ``checkpoint-N/`` folder under :attr:`~HyperfleetCallback.output_dir`, and ``on_save`` packs
  that folder into the report's checkpoint (:mod:`hyperfleet.integrations._hf_state`), which the
  trial's checkpoint manager keeps as for any workload (``keep``, the replica, a PBT donor's
  step pinned); the folder is then removed. The report waits for the save, so one report
  carries both.
* **Resume.** :attr:`~HyperfleetCallback.ckpt_path` is the checkpoint the trial continues from
  (after a requeue, an interrupt or a PBT exploit: ``ctx.load_checkpoint()``), written back out
  as a folder for ``trainer.train(resume_from_checkpoint=...)``, or None on a fresh start.
* **Explored values win.** The Trainer's restore puts back the checkpoint's optimizer and LR
  scheduler, the donor's learning rate with them; in ``on_train_begin`` (after that restore) the
  callback sets this run's ``TrainingArguments`` (built from the member's params) on both.
* **Pruning.** A PRUNE decision sets ``control.should_training_stop``: the Trainer leaves its
  loop at that step, and ``on_train_end`` raises ``TrialPruned`` so the trial ends PRUNED and the
  code after ``trainer.train()`` does not run as if training had completed. An exploit, a pause
  or a superseded copy raise out of ``trainer.train()`` at once, as from ``ctx.report``.
* **Distributed.** In a torchrun trial (``devices: N``) the Trainer reads torchrun's environment
  and finds the trial's process group already initialised: its DDP runs over the trial's ranks,
  on gloo for CPU (``training_args()`` sets ``ddp_backend``), with no second launcher.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback

from hyperfleet.errors import TrialPruned
from hyperfleet.integrations import _hf_state
from hyperfleet.integrations._overrides import merge

if TYPE_CHECKING:
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from hyperfleet.trials.context import TrialContext

__all__ = ["HyperfleetCallback"]

logger = logging.getLogger(__name__)

# what the trial sets, and where the sweep file sets it (a user's value for one is refused)
CONTROLLED = {
    "max_steps": "trial.steps",
    "gradient_accumulation_steps": "trial.grad_accum",
    "bf16": "trial.precision",
    "fp16": "trial.precision",
    "use_cpu": "trial.resources.devices",
    "ddp_backend": "the trial's process group",
    "eval_strategy": "trial.eval_every",
    "save_strategy": "trial.checkpoint.every",
    "max_grad_norm": "trial.grad_clip",
    "seed": "the param seed",
}
OPTIONAL = ("max_steps", "max_grad_norm", "seed")  # controlled only where the trial sets them


class HyperfleetCallback(TrainerCallback):
    """Connects a ``transformers.Trainer`` to its trial (see the module docstring).

    ``ctx``: the workload's ``TrialContext``; omitted, the context of the script trial this
    process runs in (``hyperfleet.trial()``).
    """

    def __init__(self, ctx: TrialContext | None = None) -> None:
        if ctx is None:
            import hyperfleet

            ctx = hyperfleet.trial()
        self.ctx: TrialContext = ctx
        self._resume: tuple[str | None] | None = None  # ckpt_path, once computed
        self._pending: tuple[int, dict[str, float]] | None = None  # metrics awaiting the save
        self._saving: set[int] = set()  # steps whose report waits for the Trainer's save
        self._reported: int | None = None
        self._pruned: TrialPruned | None = None

    # -- what the workload passes to the Trainer ---------------------------------------------

    @property
    def output_dir(self) -> str:
        """The Trainer's ``output_dir``: a folder of the trial's directory, where the Trainer's
        checkpoint folders are written before they become the trial's checkpoints."""
        return str(Path(self.ctx.workdir) / "transformers")

    def training_args(self, **overrides: Any) -> dict[str, Any]:
        """``TrainingArguments`` keywords from the trial: ``max_steps``, precision (``bf16`` /
        ``fp16``), ``gradient_accumulation_steps``, ``max_grad_norm`` (``grad_clip``), the seed
        (param ``seed``), the device (``use_cpu``) and DDP's backend; evaluation and saving
        are driven by the callback, and nothing is reported to other trackers unless the
        user's ``overrides`` say so (``training_args(report_to="tensorboard", ...)``: they win
        over these defaults). An override of what the trial controls (:data:`CONTROLLED`) is
        refused with one line naming it."""
        ctx = self.ctx
        cfg = ctx.config
        cpu = ctx.device.type == "cpu"
        if not ctx.env.distributed:
            _one_process()
        args: dict[str, Any] = {
            "max_steps": ctx.max_steps,
            "gradient_accumulation_steps": cfg.grad_accum,
            "bf16": cfg.precision == "bf16",
            "fp16": cfg.precision == "fp16",
            "use_cpu": cpu,
            "eval_strategy": "no",
            "save_strategy": "no",
            "report_to": "none",
            "disable_tqdm": True,
        }
        if ctx.env.distributed:
            args["ddp_backend"] = ctx.env.backend  # the trial's group: gloo on CPU
        if cfg.grad_clip is not None:
            args["max_grad_norm"] = cfg.grad_clip
        if "seed" in ctx.params:
            args["seed"] = int(ctx.params["seed"])
        if cfg.steps is None:  # a script trial whose program decides its length: the user's
            del args["max_steps"]
        controlled = {k: v for k, v in CONTROLLED.items() if k in args or k not in OPTIONAL}
        return merge("training_args", args, overrides, controlled)

    @property
    def ckpt_path(self) -> str | None:
        """The checkpoint folder to resume from (``trainer.train(resume_from_checkpoint=...)``),
        or None on a fresh start. Every rank writes its own copy (read once per run)."""
        if self._resume is None:
            self._resume = (self._checkpoint_folder(),)
        return self._resume[0]

    def _checkpoint_folder(self) -> str | None:
        state = self.ctx.load_checkpoint()
        if state is None:
            return None
        step = _hf_state.packed_step(state)
        root = Path(self.ctx.workdir) / "resume" / f"rank-{self.ctx.rank}"
        if root.exists():
            shutil.rmtree(root)
        folder = _hf_state.unpack(state, root / f"checkpoint-{step}")
        logger.info("the Trainer resumes from step %d (%s)", step, folder)
        return str(folder)

    # -- the Trainer's events ----------------------------------------------------------------

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self._resume is not None and self._resume[0] is not None:
            _hf_state.apply_hyperparameters(kw.get("optimizer"), kw.get("lr_scheduler"), args)

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> TrainerControl:
        step = state.global_step
        if self.ctx.should_eval(step):
            control.should_evaluate = True
            if self._checkpoint_due(step):
                control.should_save = True
                self._saving.add(step)
        return control

    def on_evaluate(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        metrics: dict[str, Any] | None = None,
        **kw: Any,
    ) -> TrainerControl:
        step = state.global_step
        if not self.ctx.should_eval(step) or self._reported == step:
            return control  # an evaluation the workload asked for itself
        values = {
            k: float(v)
            for k, v in (metrics or {}).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        if step in self._saving:
            self._pending = (step, values)  # reported with the checkpoint, in on_save
        else:
            self._report(step, values, None, control)
        return control

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> TrainerControl:
        step = state.global_step
        if self._pending is None or self._pending[0] != step:
            return control
        _, values = self._pending
        self._pending = None
        self._saving.discard(step)
        folder = Path(args.output_dir or self.output_dir) / f"checkpoint-{step}"
        self._barrier()  # every rank's files (its RNG state) are written
        packed = _hf_state.pack(folder, step) if self.ctx.is_main else None
        try:
            self._report(step, values, packed, control)
        finally:
            if self.ctx.is_main:
                shutil.rmtree(folder, ignore_errors=True)
        return control

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        pruned, self._pruned = self._pruned, None
        if pruned is not None:
            raise pruned

    # -- helpers -----------------------------------------------------------------------------

    def _report(
        self,
        step: int,
        values: dict[str, float],
        checkpoint: dict[str, Any] | None,
        control: TrainerControl,
    ) -> None:
        self._reported = step
        try:
            self.ctx.report(step, values, checkpoint=checkpoint)
        except TrialPruned as exc:
            self._pruned = exc
            control.should_training_stop = True
            control.should_save = False

    def _checkpoint_due(self, step: int) -> bool:
        every = self.ctx.checkpoint_every
        return every is None or step % every == 0 or step == self.ctx.max_steps

    def _barrier(self) -> None:
        if self.ctx.env.distributed:
            import torch.distributed as dist

            dist.barrier()


def _one_process() -> None:
    """A trial of one process under torchrun has ``LOCAL_RANK`` set, from which accelerate
    infers a distributed run and starts a process group of one (on CPU it then fails without
    ``MASTER_ADDR``). The trial is not distributed: the variable goes, so the Trainer trains
    in this process alone (the runtime puts the environment back before a warm group's next
    trial)."""
    if os.environ.get("WORLD_SIZE", "1") == "1":
        os.environ.pop("LOCAL_RANK", None)
