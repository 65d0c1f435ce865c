"""The types of what a workload hands a pipeline (``ctx.pipeline(layers, loss_fn, ...)``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeAlias

import torch
from torch import nn

Layers: TypeAlias = Sequence[nn.Module]
"""A model as a flat list of layers, in order."""
LossFn: TypeAlias = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""``loss_fn(output, target)``: the loss of the last stage's output."""
MakeOptimizer: TypeAlias = Callable[[list[nn.Parameter]], torch.optim.Optimizer]
"""An optimizer for a stage's parameters."""
Costs: TypeAlias = Sequence[float] | None
"""Each layer's cost for the split into stages (None: ``layer_costs`` of the layers)."""
