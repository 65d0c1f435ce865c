"""One optimizer step of a data-parallel trial, nanoGPT's loop body with gradient accumulation.

A step is ``K`` micro-steps. Each runs forward under autocast and backward on ``loss / K`` so the
accumulated gradient is the mean over ``K`` micro-batches, i.e. the gradient of one ``K`` times
larger batch. DDP averages gradients across the data axis during backward; on the first
``K - 1`` micro-steps that would be wasted traffic, so they run with gradient sync off (DDP's
``no_sync``) and only the last micro-step's backward all-reduces the accumulated sum. Then:
unscale (fp16), clip the global gradient norm, optimizer step (skipped on every rank together if
any rank overflowed), zero the gradients.

``wrap_model`` applies the wrappers in this order (torchtitan's convention is to write it down):

1. move the model to its device;
2. (pipeline only: split it into stages - see :mod:`.pipeline`; every stage is then wrapped);
3. ``DistributedDataParallel`` over the data-axis group, ``bucket_cap_mb = comm.bucket_mb``;
4. the communication hook of ``comm.hook`` on that DDP (optionally counted).

Autocast is not a wrapper: it is entered around the forward by the loop (``autocast()``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from hyperfleet.spec.trial import CommConfig
from hyperfleet.trials.parallel.comm import CommCounter, register_comm_hook
from hyperfleet.trials.parallel.precision import MixedPrecision


@dataclass(frozen=True)
class StepOutcome:
    """What one optimizer step did: mean loss of its micro-batches, global grad norm, skipped?"""

    loss: float
    grad_norm: float
    skipped: bool


def wrap_model(
    model: nn.Module,
    comm: CommConfig,
    device: torch.device,
    data_group: dist.ProcessGroup | None,
    counter: CommCounter | None = None,
) -> tuple[nn.Module, object | None]:
    """Apply steps 1, 3 and 4 of the module docstring; return ``(model, hook_state)``.

    ``data_group`` is ``None`` without data parallelism (the model is returned unwrapped).
    """
    model = model.to(device)
    if data_group is None:
        return model, None
    ddp = DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        process_group=data_group,
        bucket_cap_mb=comm.bucket_mb,
    )
    state = register_comm_hook(ddp, comm, data_group, counter)
    return ddp, state


def clip_grad_norm(
    parameters: Iterable[nn.Parameter],
    max_norm: float | None,
    group: dist.ProcessGroup | None = None,
) -> float:
    """Clip gradients to a global L2 norm ``max_norm``; return the norm before clipping.

    ``group`` is the pipeline group: each stage holds a different slice of the parameters, so
    the squared norms are summed across it (data replicas hold the same averaged gradients and
    need no reduction). ``max_norm=None`` only measures.
    """
    grads = [p.grad for p in parameters if p.grad is not None]
    if grads:
        total = torch.nn.utils.get_total_norm(grads, 2.0).float()
    else:
        total = torch.zeros((), dtype=torch.float32)
    if group is not None and dist.get_world_size(group) > 1:
        sq = total.pow(2).reshape(1)
        dist.all_reduce(sq, group=group)
        total = sq.sqrt().reshape(())
    if max_norm is not None and grads and math.isfinite(float(total)):
        torch.nn.utils.clip_grads_with_norm_(grads, max_norm, total.to(grads[0].device))
    return float(total)


@dataclass(eq=False)
class TrainStep:
    """Gradient accumulation, no_sync, unscale, clip, step and zero for a (DDP) model.

    Two ways to drive it:

    * ``run(micro_batches, compute_loss)`` does a whole step: ``compute_loss(batch)`` is called
      under autocast for each of the ``K`` micro-batches;
    * ``backward_step(loss)`` after each micro-batch's forward (for a loop the workload writes):
      it returns a :class:`StepOutcome` on every ``K``-th call and ``None`` otherwise. It sets
      DDP's sync flag for the *next* forward, so non-final micro-steps do not all-reduce.

    ``grad_hook`` (tests) runs after the last backward, before unscaling: e.g. to inject an
    overflow on one rank.
    """

    model: nn.Module
    optimizer: torch.optim.Optimizer
    precision: MixedPrecision
    grad_accum: int = 1
    grad_clip: float | None = None
    clip_group: dist.ProcessGroup | None = None
    loss_group: dist.ProcessGroup | None = None
    grad_hook: Callable[[nn.Module], None] | None = field(default=None, init=False)
    _micro: int = field(default=0, init=False)
    _loss_sum: torch.Tensor | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.grad_accum < 1:
            raise ValueError(f"grad_accum must be >= 1, got {self.grad_accum}")
        self._set_sync(self.grad_accum == 1)

    def _set_sync(self, sync: bool) -> None:
        if isinstance(self.model, DistributedDataParallel):
            # What DDP.no_sync() toggles; read by DDP's forward.
            self.model.require_backward_grad_sync = sync

    def autocast(self) -> contextlib.AbstractContextManager[None]:
        return self.precision.autocast()

    def backward_step(self, loss: torch.Tensor) -> StepOutcome | None:
        """Backward on one micro-batch's loss; on the K-th, finish the optimizer step."""
        self.precision.scale(loss / self.grad_accum).backward()
        detached = loss.detach().float()
        self._loss_sum = detached if self._loss_sum is None else self._loss_sum + detached
        self._micro += 1
        if self._micro < self.grad_accum:
            self._set_sync(self._micro == self.grad_accum - 1)
            return None
        mean_loss = self._loss_sum / self.grad_accum
        self._micro = 0
        self._loss_sum = None
        self._set_sync(self.grad_accum == 1)
        return self.finish(mean_loss)

    def run(
        self,
        micro_batches: Sequence[Any],
        compute_loss: Callable[[Any], torch.Tensor],
    ) -> StepOutcome:
        """A whole step over ``K`` micro-batches (``len(micro_batches) == grad_accum``)."""
        if len(micro_batches) != self.grad_accum:
            raise ValueError(f"expected {self.grad_accum} micro-batches, got {len(micro_batches)}")
        total: torch.Tensor | float = 0.0
        last = len(micro_batches) - 1
        for i, batch in enumerate(micro_batches):
            sync_off = isinstance(self.model, DistributedDataParallel) and i < last
            with self.model.no_sync() if sync_off else contextlib.nullcontext():  # type: ignore[operator]
                with self.autocast():
                    loss = compute_loss(batch)
                self.precision.scale(loss / self.grad_accum).backward()
            total = total + loss.detach().float()
        assert isinstance(total, torch.Tensor)
        return self.finish(total / self.grad_accum)

    def finish(self, mean_loss: torch.Tensor) -> StepOutcome:
        """Unscale, agree on overflow, clip, step, zero; report the loss averaged over ranks."""
        if self.grad_hook is not None:
            self.grad_hook(self.model)
        found_inf = self.precision.unscale_(self.optimizer)
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        norm = (
            float("inf") if found_inf else clip_grad_norm(params, self.grad_clip, self.clip_group)
        )
        stepped = self.precision.step(self.optimizer, found_inf)
        self.optimizer.zero_grad(set_to_none=True)
        loss = mean_loss.reshape(1).clone()
        if self.loss_group is not None and dist.get_world_size(self.loss_group) > 1:
            dist.all_reduce(loss, group=self.loss_group)
            loss /= dist.get_world_size(self.loss_group)
        return StepOutcome(loss=float(loss.item()), grad_norm=norm, skipped=not stepped)
