"""One object per trial that applies its parallel configuration (what ``ctx`` delegates to).

Built once, after the default process group exists, from the trial config's ``parallel``,
``comm``, ``precision``, ``grad_accum`` and ``grad_clip``. A workload then writes one loop for
every layout::

    model = par.wrap(model)                              # DDP + comm hook (data axis)
    opt = torch.optim.AdamW(model.parameters())
    for x, y in batches:                                 # K micro-batches per optimizer step
        with par.autocast():
            loss = loss_fn(model(x), y)
        out = par.backward_step(loss, opt)               # StepOutcome every K-th call

or, with a pipeline (``parallel.pipeline > 1``)::

    runner = par.pipeline(model.layers(), loss_fn, lambda ps: torch.optim.AdamW(ps))
    out = runner.train_step(x, y)                        # loss on every rank
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch import nn

from hyperfleet.errors import ConfigError
from hyperfleet.spec.trial import CommConfig, ParallelConfig, Precision
from hyperfleet.trials.parallel.comm import CommCounter
from hyperfleet.trials.parallel.mesh import Layout, ParallelGroups, build_groups
from hyperfleet.trials.parallel.precision import MixedPrecision
from hyperfleet.trials.parallel.step import StepOutcome, TrainStep, wrap_model
from hyperfleet.trials.parallel.throughput import ThroughputMeter

if TYPE_CHECKING:
    from hyperfleet.trials.parallel.pipeline import PipelineRunner
    from hyperfleet.trials.parallel.pipeline_types import Costs, Layers, LossFn, MakeOptimizer


class Parallelism:
    """The trial's layout, groups, precision and step logic; see the module docstring."""

    def __init__(
        self,
        parallel: ParallelConfig,
        comm: CommConfig,
        precision: Precision,
        device: torch.device,
        grad_accum: int = 1,
        grad_clip: float | None = None,
        count_comm: bool = False,
    ) -> None:
        world = dist.get_world_size() if dist.is_initialized() else 1
        self.parallel, self.comm, self.device = parallel, comm, torch.device(device)
        self.grad_accum, self.grad_clip = grad_accum, grad_clip
        self.groups: ParallelGroups = build_groups(Layout.from_config(parallel, world), device.type)
        self.precision = MixedPrecision(precision, self.device)
        self.comm_counter = CommCounter() if count_comm else None
        self._model: nn.Module | None = None
        self._steps: dict[int, TrainStep] = {}
        self.hook_state: object | None = None

    def wrap(self, model: nn.Module) -> nn.Module:
        """Move to the device, DDP over the data axis, comm hook (``step.wrap_model``)."""
        if self.groups.layout.pp_enabled:
            raise ConfigError(
                f"parallel.pipeline: {self.parallel.pipeline}; a pipelined trial builds its "
                f"model with ctx.pipeline(layers, ...), not ctx.wrap(model)"
            )
        self._model, self.hook_state = wrap_model(
            model, self.comm, self.device, self.groups.data_group, self.comm_counter
        )
        return self._model

    def autocast(self) -> contextlib.AbstractContextManager[None]:
        return self.precision.autocast()

    def train_step(self, optimizer: torch.optim.Optimizer) -> TrainStep:
        """The :class:`TrainStep` of the wrapped model and ``optimizer`` (one per optimizer)."""
        if self._model is None:
            raise RuntimeError("call wrap(model) before the first backward_step")
        key = id(optimizer)
        if key not in self._steps:
            self._steps[key] = TrainStep(
                self._model,
                optimizer,
                self.precision,
                self.grad_accum,
                self.grad_clip,
                loss_group=None,  # no collective per step; mean_over_data() at report time
            )
        return self._steps[key]

    def backward_step(
        self, loss: torch.Tensor, optimizer: torch.optim.Optimizer
    ) -> StepOutcome | None:
        """Backward one micro-batch; every ``grad_accum``-th call completes the optimizer step.

        The outcome's ``loss`` is this data replica's; ``mean_over_data`` averages it.
        """
        return self.train_step(optimizer).backward_step(loss)

    def mean_over_data(self, value: float) -> float:
        """Average a per-replica scalar (a loss) over the data axis (collective; for reports)."""
        group = self.groups.data_group
        if group is None:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(t, group=group)
        return float(t.item()) / dist.get_world_size(group)

    def pipeline(
        self, layers: Layers, loss_fn: LossFn, optimizer_factory: MakeOptimizer, costs: Costs = None
    ) -> PipelineRunner:
        """This rank's stages of ``layers`` (split by cost), their schedule and optimizer."""
        from hyperfleet.trials.parallel.pipeline import PipelineRunner

        return PipelineRunner(
            layers,
            loss_fn,
            optimizer_factory,
            self.parallel,
            self.comm,
            self.groups,
            self.precision,
            self.device,
            grad_clip=self.grad_clip,
            costs=costs,
            counter=self.comm_counter,
        )

    def throughput(self, n_params: int) -> ThroughputMeter:
        """A meter for ``n_params`` parameters over all of the trial's devices."""
        return ThroughputMeter(n_params, self.device, self.groups.layout.world_size)
