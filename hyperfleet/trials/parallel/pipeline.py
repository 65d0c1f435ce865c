"""Pipeline parallelism on ``torch.distributed.pipelining``: balanced stages and their schedule.

A model given as a flat list of layers is cut into ``S`` contiguous *stages*, one per pipeline
rank (``virtual_stages`` per rank when interleaved). A batch is split into ``M`` micro-batches
that flow through the stages; a stage's backward for a micro-batch needs the next stage's
input gradient. Schedules order this work:

* **GPipe** - all ``M`` forwards, then all ``M`` backwards. Simple, but every stage keeps ``M``
  micro-batches of activations.
* **1F1B** - after a warm-up of ``P - stage - 1`` forwards, each stage alternates one forward and
  one backward, so at most ``P`` micro-batches are alive per stage.
* **Interleaved 1F1B** - each rank holds ``v`` non-adjacent stages (rank ``r`` holds stages
  ``r, r + P, ...``), which shortens the fill/drain.

With equal stage times, the *bubble* (the fraction of a step a stage sits idle while the pipeline
fills and drains) is ``(P - 1) / (M + P - 1)`` for GPipe and 1F1B, about ``v`` times smaller when
interleaved. Equal stage times are what partitioning aims at: layers are split to minimise the
most expensive stage, by parameter count or by a forward time measured once, not by layer count.

Hybrid data x pipeline: each stage is wrapped in DDP over its data-axis group; the stage runs
its non-final micro-batches under ``no_sync`` and all-reduces once after the last backward.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import (
    PipelineStage,
    Schedule1F1B,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
)

from hyperfleet.spec.trial import CommConfig, ParallelConfig
from hyperfleet.trials.parallel.comm import CommCounter
from hyperfleet.trials.parallel.mesh import ParallelGroups
from hyperfleet.trials.parallel.pipeline_types import Costs, Layers, LossFn, MakeOptimizer
from hyperfleet.trials.parallel.precision import MixedPrecision, autocast
from hyperfleet.trials.parallel.step import StepOutcome, clip_grad_norm, wrap_model

log = logging.getLogger(__name__)

CostKind = Literal["params", "time"]


def layer_costs(
    layers: Sequence[nn.Module], by: CostKind = "params", example: torch.Tensor | None = None
) -> list[float]:
    """Cost of each layer: its parameter count, or its forward time on ``example`` (once)."""
    if by == "params":
        return [float(max(1, sum(p.numel() for p in layer.parameters()))) for layer in layers]
    if example is None:
        raise ValueError("layer_costs(by='time') needs an example input")
    costs: list[float] = []
    x = example
    with torch.no_grad():
        for layer in layers:
            layer(x)  # warm-up
            t0 = time.perf_counter()
            x = layer(x)
            costs.append(max(time.perf_counter() - t0, 1e-9))
    return costs


def partition(costs: Sequence[float], n_parts: int) -> list[int]:
    """Contiguous split of ``costs`` into ``n_parts`` non-empty parts minimising the largest sum.

    Returns ``n_parts + 1`` boundaries: part ``i`` is ``costs[b[i]:b[i+1]]``. Exact dynamic
    programme, ``O(n^2 * parts)`` - the layer lists here are short.
    """
    n = len(costs)
    if not 1 <= n_parts <= n:
        raise ValueError(f"cannot split {n} layers into {n_parts} stages")
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    inf = float("inf")
    # best[k][j]: minimal max-part cost splitting the first j layers into k parts
    best = [[inf] * (n + 1) for _ in range(n_parts + 1)]
    cut = [[0] * (n + 1) for _ in range(n_parts + 1)]
    best[0][0] = 0.0
    for k in range(1, n_parts + 1):
        for j in range(k, n - (n_parts - k) + 1):
            for i in range(k - 1, j):
                value = max(best[k - 1][i], prefix[j] - prefix[i])
                if value < best[k][j]:
                    best[k][j], cut[k][j] = value, i
    bounds = [n]
    for k in range(n_parts, 0, -1):
        bounds.append(cut[k][bounds[-1]])
    return bounds[::-1]


class _StageModule(nn.Sequential):
    """A stage's layers, run under autocast, handing fp32 activations to the next stage."""

    def __init__(self, layers: Sequence[nn.Module], precision: MixedPrecision) -> None:
        super().__init__(*layers)
        self._precision = precision.precision
        self._device_type = precision.device.type

    def forward(self, x: Any) -> Any:  # type: ignore[override]
        with autocast(self._precision, self._device_type):  # type: ignore[arg-type]
            y = super().forward(x)
        return y.float() if torch.is_floating_point(y) else y


_SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


class PipelineRunner:
    """This rank's stage(s), the schedule over them, and the optimizer of their parameters.

    ``train_step(inputs, targets)`` runs one optimizer step over ``microbatches`` micro-batches
    of the batch and returns the loss on every rank (broadcast from the last stage, averaged over
    data replicas).
    """

    def __init__(
        self,
        layers: Layers,
        loss_fn: LossFn,
        optimizer_factory: MakeOptimizer,
        parallel: ParallelConfig,
        comm: CommConfig,
        groups: ParallelGroups,
        precision: MixedPrecision,
        device: torch.device,
        grad_clip: float | None = None,
        costs: Costs = None,
        counter: CommCounter | None = None,
    ) -> None:
        self.groups = groups
        self.precision = precision
        self._precision = precision
        self.grad_clip = grad_clip
        p = groups.layout.pipeline
        n_stages = parallel.n_stages
        costs = list(costs) if costs is not None else layer_costs(layers)
        self.bounds = partition(costs, n_stages)
        _log_split(self.bounds, costs)
        self.stage_ids = list(range(groups.pipeline_rank, n_stages, p))
        self.n_stages = n_stages
        self.n_microbatches = parallel.n_microbatches
        self.schedule_name = parallel.schedule
        self.device = device
        self.layers = list(layers)
        self.modules: list[nn.Module] = []
        self.hook_states: list[object | None] = []
        for s in self.stage_ids:
            module = _StageModule(layers[self.bounds[s] : self.bounds[s + 1]], precision)
            wrapped, state = wrap_model(module, comm, device, groups.data_group, counter)
            self.modules.append(wrapped)
            self.hook_states.append(state)
        self.has_first = 0 in self.stage_ids
        self.has_last = n_stages - 1 in self.stage_ids

        def scaled_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            return precision.scale(loss_fn(output.float(), target))

        self._loss_fn = scaled_loss
        self.schedule: Any = None
        self.optimizer = optimizer_factory(self.parameters())

    def _build_schedule(self, inputs: torch.Tensor) -> None:
        """Stages with static shapes (one local forward of a micro-batch), then the schedule.

        Static metadata keeps the stages from running a shape-inference forward/backward of
        their (DDP-wrapped) modules, which DDP would count as a training iteration.
        """
        example = inputs.tensor_split(self.n_microbatches)[0]
        boundaries = _stage_boundaries(self.layers, self.bounds, example, self._precision)
        stages = [
            PipelineStage(
                module,
                s,
                self.n_stages,
                self.device,
                input_args=boundaries[s],
                output_args=boundaries[s + 1],
                group=self.groups.pipeline_group,
            )
            for s, module in zip(self.stage_ids, self.modules, strict=True)
        ]
        m = self.n_microbatches
        if self.schedule_name == "interleaved-1f1b":
            self.schedule = ScheduleInterleaved1F1B(stages, m, loss_fn=self._loss_fn)
        else:
            self.schedule = _SCHEDULES[self.schedule_name](stages[0], m, loss_fn=self._loss_fn)

    def parameters(self) -> list[nn.Parameter]:
        return [q for module in self.modules for q in module.parameters()]

    def _run(self, method: str, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The schedule's ``step`` or ``eval`` once; the mean micro-batch loss on every rank
        of the pipeline. Each stage passes what it holds: inputs on the first, targets on the
        last (the others only need the batch's shape to build the schedule)."""
        if self.schedule is None:
            self._build_schedule(inputs)
        run = getattr(self.schedule, method)
        losses: list[torch.Tensor] = []
        if self.has_first and self.has_last:
            run(inputs, target=targets, losses=losses)
        elif self.has_first:
            run(inputs)
        elif self.has_last:
            run(target=targets, losses=losses)
        else:
            run()
        if losses:
            loss = torch.stack([x.detach().float() for x in losses]).mean().reshape(1)
            loss = loss / self.precision.loss_scale
        else:
            loss = torch.zeros(1, device=self.precision.device)
        group = self.groups.pipeline_group
        last = self.groups.layout.pipeline - 1
        dist.broadcast(loss, group=group, group_src=last)
        return loss

    def forward_backward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Run the schedule once; the mean micro-batch loss on every rank of the pipeline.

        Every rank passes the batch (only its shape matters off the first and last stage).
        """
        return self._run("step", inputs, targets)

    @torch.no_grad()
    def evaluate(self, inputs: torch.Tensor, targets: torch.Tensor) -> float:
        """Mean loss of a forward-only pass (every rank of the pipeline); the batch must
        have the training batch's shape: the stages were built for it."""
        for module in self.modules:
            module.eval()
        try:
            return float(self._run("eval", inputs, targets).item())
        finally:
            for module in self.modules:
                module.train()

    def train_step(self, inputs: torch.Tensor, targets: torch.Tensor) -> StepOutcome:
        """Forward/backward over the micro-batches, unscale, agree, clip, step, zero."""
        loss = self.forward_backward(inputs, targets)
        found_inf = self.precision.unscale_(self.optimizer)
        norm = (
            float("inf")
            if found_inf
            else clip_grad_norm(self.parameters(), self.grad_clip, self.groups.pipeline_group)
        )
        stepped = self.precision.step(self.optimizer, found_inf)
        self.optimizer.zero_grad(set_to_none=True)
        data_group = self.groups.data_group
        if data_group is not None:
            dist.all_reduce(loss, group=data_group)
            loss /= dist.get_world_size(data_group)
        return StepOutcome(loss=float(loss.item()), grad_norm=norm, skipped=not stepped)


def _stage_boundaries(
    layers: Sequence[nn.Module],
    bounds: Sequence[int],
    example: torch.Tensor,
    precision: MixedPrecision,
) -> list[torch.Tensor]:
    """Meta tensors shaped like the activation at each stage boundary, for one micro-batch."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    out = [example.to("meta")]
    with FakeTensorMode(allow_non_fake_inputs=True) as mode, torch.no_grad():
        x = mode.from_tensor(example)
        for s in range(len(bounds) - 1):
            stage = _StageModule(layers[bounds[s] : bounds[s + 1]], precision)
            x = stage(x)
            grad = torch.is_floating_point(x)
            out.append(torch.empty(x.shape, dtype=x.dtype, device="meta", requires_grad=grad))
    return out


def _log_split(bounds: Sequence[int], costs: Sequence[float]) -> None:
    parts = [
        f"stage {i}: layers {bounds[i]}..{bounds[i + 1] - 1} "
        f"(cost {sum(costs[bounds[i] : bounds[i + 1]]):.3g})"
        for i in range(len(bounds) - 1)
    ]
    log.info("pipeline split by cost: %s", "; ".join(parts))
