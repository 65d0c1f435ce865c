"""``TrialContext``: everything a workload function sees of the platform.

A workload is ``def main(ctx)``. It reads its hyperparameters from ``ctx.params``, continues
from ``ctx.load_checkpoint()`` if that returns a state, trains to ``ctx.max_steps`` and calls
``ctx.report(step, metrics, checkpoint=...)`` as it goes. The context is a facade over four
rooms, each in its own module:

* **the environment** — rank, world size, device, the data-parallel coordinates, and the
  trial's typed configuration (:class:`hyperfleet.spec.trial.TrialConfig`), read here;
* **parallelism** — ``ctx.wrap``, ``ctx.autocast``, ``ctx.backward_step``, or ``ctx.pipeline``
  when ``parallel.pipeline > 1``; ``ctx.mean_over_data`` and ``ctx.throughput`` for reports.
  They delegate to one :class:`~hyperfleet.trials.parallel.Parallelism`, built on first use
  (every rank must call), so one loop serves every layout;
* **full-state checkpoints** — ``ctx.state`` and ``ctx.restore`` (:mod:`hyperfleet.trials.state`:
  model, optimizer, scaler, data position and RNG, independent of the world size);
* **the report protocol** — ``ctx.report`` (collective), ``ctx.record`` and ``ctx.follow``
  (:mod:`hyperfleet.trials.reporting`): rank 0 saves the checkpoint, records the report and
  gets a :class:`~hyperfleet.spec.wire.Decision` from the runtime's reporter; the decision is
  broadcast so all ranks act on the same step, and a prune raises
  :class:`hyperfleet.TrialPruned` on every rank, an exploit or a pause ``Exploit``/``Pause``.
  Values are checked before anything is kept: a metric that is not a real number, or a
  checkpoint that could not be loaded back, fails the report on every rank before the
  checkpoint is written (:mod:`hyperfleet.trials.values`).

The runtime closes the context when the workload returns: a report after that (a thread the
workload left behind) is refused with a warning and changes nothing of the finished trial.

The context knows nothing of how it was scheduled: the runtime hands it a ``reporter`` (rank 0
only) and catches the ``ScheduleChange`` exceptions.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hyperfleet.spec.trial import TrialConfig
from hyperfleet.spec.wire import CONTINUE, Decision
from hyperfleet.trials import distributed, reporting
from hyperfleet.trials.checkpoint import CheckpointManager
from hyperfleet.trials.distributed import DistEnv, broadcast_object
from hyperfleet.trials.reporting import Exploit, Pause, Reporter, ScheduleChange

if TYPE_CHECKING:
    import contextlib

    import torch
    from torch import nn

    from hyperfleet.trials.parallel.api import Parallelism
    from hyperfleet.trials.parallel.pipeline import PipelineRunner
    from hyperfleet.trials.parallel.pipeline_types import Costs, Layers, LossFn, MakeOptimizer
    from hyperfleet.trials.parallel.step import StepOutcome
    from hyperfleet.trials.parallel.throughput import ThroughputMeter

__all__ = ["CONTINUE", "Exploit", "Pause", "Reporter", "ScheduleChange", "TrialContext"]

logger = logging.getLogger(__name__)


class TrialContext:
    """The trial's view of the platform (see the module docstring)."""

    def __init__(
        self,
        *,
        params: Mapping[str, Any],
        env: DistEnv,
        max_steps: int,
        eval_every: int,
        trial_number: int,
        sweep: str,
        config: TrialConfig,
        workdir: Path,
        checkpoints: CheckpointManager,
        checkpoint_every: int | None = None,
        reporter: Reporter | None = None,
        restore_step: int | None = None,
        fresh: bool = False,
    ) -> None:
        if not isinstance(config, TrialConfig):
            raise TypeError(
                f"TrialContext(config=...) takes a hyperfleet.spec.trial.TrialConfig, "
                f"got {type(config).__name__}"
            )
        self.params = dict(params)
        self.env = env
        self.max_steps = max_steps
        self.eval_every = eval_every
        self.trial_number = trial_number
        self.sweep = sweep
        self.config = config
        self.workdir = workdir
        self.checkpoints = checkpoints
        self.checkpoint_every = checkpoint_every
        self._reporter = reporter
        self._restore_step = restore_step
        self._fresh = fresh
        self._par: Parallelism | None = None
        self._closed = False
        self.resumed_from: int | None = None
        self.last_step: int | None = None  # the step of the last report, for error messages

    # -- distributed environment ----------------------------------------------------------

    @property
    def rank(self) -> int:
        return self.env.rank

    @property
    def world_size(self) -> int:
        return self.env.world_size

    @property
    def local_rank(self) -> int:
        return self.env.local_rank

    @property
    def device(self) -> torch.device:
        """This rank's device (imports torch on first use: a workload that never asks for it
        runs without torch, see :func:`hyperfleet.trials.distributed.init`)."""
        return distributed.torch_device(self.env)

    @property
    def is_main(self) -> bool:
        return self.env.is_main

    @property
    def data_size(self) -> int:
        """Data-parallel replicas: ``parallel.data`` (the world size without a pipeline)."""
        return self.world_size // self.config.parallel.pipeline

    @property
    def data_rank(self) -> int:
        """This rank's data replica (ranks of one pipeline share it): for data sharding."""
        return self.rank // (self.world_size // self.data_size)

    # -- parallelism (delegations to one lazily built Parallelism) ------------------------

    @property
    def parallelism(self) -> Parallelism:
        """The trial's layout, precision and step logic, built on first use (collective)."""
        if self._par is None:
            from hyperfleet.trials.parallel.api import Parallelism

            cfg = self.config
            parallel = cfg.parallel
            if cfg.resources.elastic or cfg.resources.elastic_nodes:
                # its data axis follows its size: a trial continued on the nodes left after
                # one was lost runs at fewer ranks than its launch's config says
                parallel = parallel.model_copy(update={"data": self.data_size})
            self._par = Parallelism(
                parallel,
                cfg.comm,
                cfg.precision,
                self.device,
                grad_accum=cfg.grad_accum,
                grad_clip=cfg.grad_clip,
            )
        return self._par

    @property
    def pipelined(self) -> bool:
        return self.config.parallel.pipeline > 1

    def wrap(self, model: nn.Module) -> nn.Module:
        """The model on its device, DDP over the data axis with ``comm``'s hook."""
        return self.parallelism.wrap(model)

    def autocast(self) -> contextlib.AbstractContextManager[None]:
        """Autocast for ``precision`` (a no-op for fp32); enter it around the forward."""
        return self.parallelism.autocast()

    def backward_step(
        self, loss: torch.Tensor, optimizer: torch.optim.Optimizer
    ) -> StepOutcome | None:
        """Backward one micro-batch; every ``grad_accum``-th call steps (returns the outcome)."""
        return self.parallelism.backward_step(loss, optimizer)

    def pipeline(
        self, layers: Layers, loss_fn: LossFn, optimizer_factory: MakeOptimizer, costs: Costs = None
    ) -> PipelineRunner:
        """This rank's stages of ``layers`` (split by cost), their schedule and optimizer."""
        return self.parallelism.pipeline(layers, loss_fn, optimizer_factory, costs)

    def mean_over_data(self, value: float) -> float:
        """``value`` (a replica's loss) averaged over the data replicas (collective)."""
        return self.parallelism.mean_over_data(value)

    def precision_metrics(self) -> dict[str, float]:
        """With fp16 loss scaling: the current ``loss_scale`` and the ``skipped_steps`` (on
        overflow, all ranks together) over the trial, resumes included; otherwise nothing."""
        return self.parallelism.precision.metrics()

    def throughput(self, n_params: int) -> ThroughputMeter:
        """A meter of samples/s, tokens/s, step time and (CUDA) MFU over the trial's devices."""
        from hyperfleet.trials.parallel.throughput import ThroughputMeter

        return ThroughputMeter(n_params, self.device, self.world_size)

    # -- full trial state ---------------------------------------------------------------

    def _default_scaler(self) -> Any:
        if self._par is not None and self._par.precision.scaling:
            return self._par.precision
        return None

    def state(
        self,
        step: int,
        *,
        model: nn.Module | PipelineRunner,
        optimizer: torch.optim.Optimizer | None = None,
        scaler: Any = None,
        scheduler: Any = None,
        loader: Any = None,
        extra: dict[str, Any] | None = None,
        force: bool = False,
        local: bool = False,
    ) -> dict[str, Any] | None:
        """The full state at ``step`` on rank 0 (None elsewhere, or when no checkpoint is due).

        Collective unless ``local`` (this rank's objects alone, e.g. a parameter server).
        ``model`` is the (wrapped) model or, with a pipeline, the runner (its optimizer is the
        default); ``scaler`` defaults to the fp16 loss scaler. See :mod:`hyperfleet.trials.state`.
        """
        if not (force or self._checkpoint_due(step)):
            return None
        from hyperfleet.trials.state import gather_state

        scaler = scaler if scaler is not None else self._default_scaler()
        parts = {"scaler": scaler, "scheduler": scheduler, "loader": loader, "extra": extra}
        pipelined = self.pipelined and not local
        return gather_state(
            step,
            model=model,
            optimizer=optimizer,
            parts=parts,
            env=self.env,
            data_rank=self.parallelism.groups.data_rank if pipelined else None,
            local=local,
        )

    def restore(
        self,
        state: dict[str, Any] | None,
        *,
        model: nn.Module | PipelineRunner,
        optimizer: torch.optim.Optimizer | None = None,
        scaler: Any = None,
        scheduler: Any = None,
        loader: Any = None,
    ) -> int:
        """Load a state of :meth:`state` (saved at any layout) into this trial; its step.

        Collective. Every rank passes what ``load_checkpoint`` returned. The optimizer's
        hyperparameters (lr, weight decay, ...) stay those this run built from ``ctx.params``:
        loading an optimizer state would otherwise put back the checkpoint's, and a PBT
        member's explored values must win. With an LR ``scheduler`` the checkpoint's are kept,
        since the scheduler owns them.
        """
        from hyperfleet.trials.state import restore_state

        return restore_state(
            state,
            model=model,
            optimizer=optimizer,
            scaler=scaler if scaler is not None else self._default_scaler(),
            scheduler=scheduler,
            loader=loader,
            rank=self.rank,
            pipelined=self.pipelined,
        )

    # -- the contract ------------------------------------------------------------------------

    def should_eval(self, step: int) -> bool:
        """True at every ``eval_every``-th step and at the last step."""
        return step % self.eval_every == 0 or step == self.max_steps

    def load_checkpoint(self) -> dict[str, Any] | None:
        """The checkpoint to continue from, or None on a fresh start.

        Normally this trial's latest intact checkpoint (the replica's when the primary copy is
        gone or corrupt); when the runtime says otherwise the checkpoint of the step it names
        (the step rank 0 found when the trial started, the same on every rank; a PBT member's
        donor's step after an exploit), or none (``fresh``: the trial starts at step 0).
        """
        if self._fresh:
            return None
        found = self.checkpoints.load_at(self._restore_step)
        if found is None:
            return None
        step, state = found
        self.resumed_from = step
        logger.info("trial %s resumes from its checkpoint at step %d", self.trial_number, step)
        return state

    def checkpoint_due(self, step: int) -> bool:
        """Whether a report at ``step`` keeps its checkpoint (``trial.checkpoint.every``): a
        loop whose checkpoint is costly to build (a trainer's) builds it only then."""
        return self._checkpoint_due(step)

    def _checkpoint_due(self, step: int) -> bool:
        if self.checkpoint_every is None:
            return True
        return step % self.checkpoint_every == 0 or step == self.max_steps

    def close(self) -> None:
        """The workload returned (the runtime calls this): later reports are refused."""
        self._closed = True

    def _refused_after_close(self, step: object) -> bool:
        if self._closed:
            logger.warning(
                "ctx.report(step %s) after the workload returned is refused: a finished trial "
                "keeps what it reported while it ran",
                step,
            )
        return self._closed

    def report(
        self,
        step: int,
        metrics: Mapping[str, float],
        checkpoint: Mapping[str, Any] | None = None,
    ) -> None:
        """Record ``metrics`` at ``step``; may raise ``TrialPruned`` (on every rank).

        Collective. Only rank 0's ``checkpoint`` is used (others may pass None). A metric that
        is not a real number (or a checkpoint that could not be loaded back) raises
        ``ReportValueError`` (``CheckpointContentError``) on every rank; nothing is kept.
        """
        if self._refused_after_close(step):
            return
        self.last_step = step
        decision: Decision | Exception = CONTINUE
        if self.is_main:
            try:
                decision = self.record(step, metrics, checkpoint)
            except Exception as exc:
                if self.env.distributed:  # every rank fails at this step, none waits
                    broadcast_object(reporting.shared_failure(exc, step), self.env)
                raise
        decided = broadcast_object(decision, self.env)
        if isinstance(decided, Exception):
            raise decided
        self.follow(decided, step)

    def record(
        self, step: int, metrics: Mapping[str, float], checkpoint: Mapping[str, Any] | None = None
    ) -> Decision:
        """Rank 0 alone: check the values, save the checkpoint (when due), record the report,
        return the decision.

        For loops where rank 0 reports by itself (a parameter server); hand the decision to
        :meth:`follow` on every rank when they next meet. ``report`` is both.
        """
        if self._refused_after_close(step):
            return CONTINUE
        self.last_step = step
        return reporting.record(
            step,
            metrics,
            checkpoint,
            checkpoints=self.checkpoints,
            due=self._checkpoint_due(step),
            reporter=self._reporter,
        )

    def follow(self, decision: Decision, step: int | None = None) -> None:
        """Act on a decision: raise ``TrialPruned``, ``Exploit`` or ``Pause`` (or return)."""
        reporting.follow(decision, step)
