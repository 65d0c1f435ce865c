"""``TrialContext``: everything a workload function sees of the platform.

A workload is ``def main(ctx)``. It reads its hyperparameters from ``ctx.params``, continues
from ``ctx.load_checkpoint()`` if that returns a state, trains to ``ctx.max_steps`` and calls
``ctx.report(step, metrics, checkpoint=...)`` as it goes. ``report`` is collective: every rank
calls it at the same step. Rank 0 saves the checkpoint, records the report and asks the
scheduler for a decision; the decision is broadcast so all ranks act on the same step, and a
prune raises :class:`hyperfleet.TrialPruned` on every rank.

The context knows nothing of how it was scheduled: the runtime hands it a ``reporter``
(rank 0 only) that returns a decision as a plain dict, and catches the ``ScheduleChange``
exceptions that ``report`` raises for an exploit or a pause (population-based training) to
restart the workload in the same processes or end them.

**Parallelism helpers** serve every layout of the trial config with one loop: ``ctx.wrap``,
``ctx.autocast``, ``ctx.backward_step``, or ``ctx.pipeline`` when ``parallel.pipeline > 1``;
``ctx.mean_over_data`` and ``ctx.throughput`` for reports. They delegate to one
:class:`~hyperfleet.trials.parallel.Parallelism`, built on first use (every rank must call).

**Full-state checkpoints.** ``ctx.state(step, model=..., optimizer=..., loader=...)`` gathers
model, optimizer, loss scaler, data position and every rank's RNG into one world-size
independent dict on rank 0 (None elsewhere, and everywhere when no checkpoint is due), for
``ctx.report(..., checkpoint=...)``; ``ctx.restore(state, ...)`` loads it at any layout and
returns its step. Without a pipeline both go through :mod:`hyperfleet.trials.reshard`. With one,
the stages' states are gathered under the unsplit model's layer indices (``layers()[i]`` is key
prefix ``i.``): an unsplit model's keys, so checkpoints move between pipelined and plain layouts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from hyperfleet.errors import TrialPruned
from hyperfleet.trials.checkpoint import CheckpointManager, capture_rng_state
from hyperfleet.trials.distributed import DistEnv, broadcast_object
from hyperfleet.trials.stage_state import (
    assemble_state,
    fqn_optimizer_state,
    load_fqn_optimizer,
    merge_stage_states,
    stage_layers,
    to_cpu,
)

if TYPE_CHECKING:
    import contextlib

    from hyperfleet.trials.parallel.api import Parallelism
    from hyperfleet.trials.parallel.pipeline import PipelineRunner
    from hyperfleet.trials.parallel.step import StepOutcome
    from hyperfleet.trials.parallel.throughput import ThroughputMeter

logger = logging.getLogger(__name__)

#: rank 0's callback: (step, metrics) -> decision as a dict with at least "kind" and "reason"
Reporter = Callable[[int, Mapping[str, float]], dict[str, Any]]

CONTINUE: dict[str, Any] = {"kind": "continue", "reason": ""}


class ScheduleChange(Exception):  # noqa: N818 - control flow, like TrialPruned
    """Raised by ``report`` on every rank when the scheduler changes the trial's course.

    Workloads let it propagate (as they do ``TrialPruned``); the runtime handles it.
    """

    def __init__(self, decision: Mapping[str, Any]) -> None:
        super().__init__(decision.get("reason") or decision["kind"])
        self.decision = dict(decision)


class Exploit(ScheduleChange):
    """Continue from ``decision['donor']``'s checkpoint with ``decision['params']``."""


class Pause(ScheduleChange):
    """Give the devices back; the scheduler resumes the trial later from its checkpoint."""


# -- pipeline state: this rank's stages under the unsplit model's layer indices ---------------


def _hyper(group: Mapping[str, Any]) -> dict[str, Any]:
    """An optimizer param group's hyperparameters (everything but its params)."""
    return {k: v for k, v in group.items() if k != "params"}


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
        config: Any,
        workdir: Path,
        checkpoints: CheckpointManager,
        checkpoint_every: int | None = None,
        reporter: Reporter | None = None,
        restore_step: int | None = None,
    ) -> None:
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
        self._par: Parallelism | None = None
        self.resumed_from: int | None = None

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
        return self.env.device

    @property
    def is_main(self) -> bool:
        return self.env.is_main

    @property
    def data_size(self) -> int:
        """Data-parallel replicas: ``parallel.data`` (the world size without a pipeline)."""
        parallel = getattr(self.config, "parallel", None)
        return self.world_size // parallel.pipeline if parallel is not None else self.world_size

    @property
    def data_rank(self) -> int:
        """This rank's data replica (ranks of one pipeline share it): for data sharding."""
        return self.rank // (self.world_size // self.data_size)

    # -- parallelism (delegations to one lazily built Parallelism) ------------------------

    @property
    def parallelism(self) -> Parallelism:
        """The trial's layout, precision and step logic, built on first use (collective)."""
        if self._par is None:
            from hyperfleet.spec.trial import CommConfig, ParallelConfig
            from hyperfleet.trials.parallel.api import Parallelism

            cfg = self.config
            self._par = Parallelism(
                getattr(cfg, "parallel", None) or ParallelConfig(),
                getattr(cfg, "comm", None) or CommConfig(),
                getattr(cfg, "precision", "fp32"),
                self.device,
                grad_accum=getattr(cfg, "grad_accum", 1),
                grad_clip=getattr(cfg, "grad_clip", None),
            )
        return self._par

    @property
    def pipelined(self) -> bool:
        parallel = getattr(self.config, "parallel", None)
        return parallel is not None and parallel.pipeline > 1

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
        self,
        layers: Sequence[nn.Module],
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        optimizer_factory: Callable[[list[nn.Parameter]], torch.optim.Optimizer],
        costs: Sequence[float] | None = None,
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
        default); ``scaler`` defaults to the fp16 loss scaler.
        """
        from hyperfleet.trials import reshard

        if not (force or self._checkpoint_due(step)):
            return None
        scaler = scaler if scaler is not None else self._default_scaler()
        parts = {"scaler": scaler, "scheduler": scheduler, "loader": loader, "extra": extra}
        if local or not self.pipelined:
            if not local:
                return reshard.build_trial_state(step, model=model, optimizer=optimizer, **parts)
            box = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
            assert isinstance(box, nn.Module)
            own = {"model": to_cpu(box.state_dict()), "optimizer": None}
            if optimizer is not None:
                own["optimizer"] = fqn_optimizer_state(box, optimizer)
            return assemble_state(step, 1, own, [capture_rng_state()], parts)
        runner: Any = model
        box = stage_layers(runner)
        opt = optimizer or runner.optimizer
        mine = None
        if self.parallelism.groups.data_rank == 0:
            mine = {"model": to_cpu(box.state_dict()), "optimizer": fqn_optimizer_state(box, opt)}
        gathered: list[Any] | None = [None] * self.world_size if self.is_main else None
        dist.gather_object((capture_rng_state(), mine), gathered, dst=0)
        if gathered is None:
            return None
        merged = merge_stage_states([g[1] for g in gathered])
        return assemble_state(step, self.world_size, merged, [g[0] for g in gathered], parts)

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
        opt = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        built = [] if opt is None else [_hyper(g) for g in opt.param_groups]
        step = self._restore_state(state, model, optimizer, scaler, scheduler, loader)
        if opt is not None and scheduler is None:
            for group, hyper in zip(opt.param_groups, built, strict=True):
                group.update(hyper)
        return step

    def _restore_state(
        self, state: Any, model: Any, optimizer: Any, scaler: Any, scheduler: Any, loader: Any
    ) -> int:
        from hyperfleet.trials import reshard

        scaler = scaler if scaler is not None else self._default_scaler()
        if not self.pipelined:
            step, _ = reshard.restore_trial_state(
                state, model=model, optimizer=optimizer, scaler=scaler, scheduler=scheduler,
                loader=loader,
            )  # fmt: skip
            return step
        if state is None:
            raise ValueError("a pipelined trial restores on every rank: pass the state everywhere")
        runner: Any = model
        box = stage_layers(runner)
        box.load_state_dict({k: state["model"][k] for k in box.state_dict()})
        if state.get("optimizer") is not None:
            load_fqn_optimizer(box, optimizer or runner.optimizer, state["optimizer"])
        for obj, key in ((scaler, "scaler"), (scheduler, "scheduler"), (loader, "data")):
            if obj is not None and state.get(key) is not None:
                obj.load_state_dict(state[key])
        step = int(state["step"])
        reshard._restore_rng(state["rng"], step, self.rank)
        return step

    # -- the contract ------------------------------------------------------------------------

    def should_eval(self, step: int) -> bool:
        """True at every ``eval_every``-th step and at the last step."""
        return step % self.eval_every == 0 or step == self.max_steps

    def load_checkpoint(self) -> dict[str, Any] | None:
        """The checkpoint to continue from, or None on a fresh start.

        Normally this trial's latest intact checkpoint (the replica's when the primary copy is
        gone or corrupt); when the runtime says otherwise (a PBT member whose latest weights
        were given up for a donor's) the checkpoint of the step it names.
        """
        found = self.checkpoints.load_at(self._restore_step)
        if found is None:
            return None
        step, state = found
        self.resumed_from = step
        logger.info("trial %s resumes from its checkpoint at step %d", self.trial_number, step)
        return state

    def _checkpoint_due(self, step: int) -> bool:
        if self.checkpoint_every is None:
            return True
        return step % self.checkpoint_every == 0 or step == self.max_steps

    def report(
        self,
        step: int,
        metrics: Mapping[str, float],
        checkpoint: Mapping[str, Any] | None = None,
    ) -> None:
        """Record ``metrics`` at ``step``; may raise ``TrialPruned`` (on every rank).

        Collective. Only rank 0's ``checkpoint`` is used (others may pass None).
        """
        decision = self.record(step, metrics, checkpoint) if self.is_main else CONTINUE
        self.follow(broadcast_object(decision, self.env), step)

    def record(
        self, step: int, metrics: Mapping[str, float], checkpoint: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Rank 0 alone: save the checkpoint (when due), record the report, return the decision.

        For loops where rank 0 reports by itself (a parameter server); hand the decision to
        :meth:`follow` on every rank when they next meet. ``report`` is both.
        """
        if checkpoint is not None and self._checkpoint_due(step):
            self.checkpoints.save(step, dict(checkpoint))
        if self._reporter is None:
            return CONTINUE
        return self._reporter(step, {k: float(v) for k, v in metrics.items()})

    def follow(self, decision: Mapping[str, Any], step: int | None = None) -> None:
        """Act on a decision: raise ``TrialPruned``, ``Exploit`` or ``Pause`` (or return)."""
        kind = decision["kind"]
        if kind == "prune":
            raise TrialPruned(decision.get("reason") or f"pruned at step {step}")
        if kind == "exploit":
            raise Exploit(decision)
        if kind == "pause":
            raise Pause(decision)
