"""Pieces shared by the built-in workloads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from hyperfleet.trials.workloads.registry import BUILTIN


def checked_params(workload: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults overridden by ``params``; an unknown name is a clear error."""
    defaults = BUILTIN[workload].params or {}
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise ValueError(
            f"workload {workload!r}: unknown parameter(s) {', '.join(unknown)}; "
            f"expected one of {', '.join(sorted(defaults))}"
        )
    return {**defaults, **params}


def wrap_ddp(model: nn.Module, world_size: int, device: torch.device) -> nn.Module:
    """DistributedDataParallel when there is more than one process."""
    if world_size == 1:
        return model
    ids = [device.index] if device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=ids)


def unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def rank_slice(global_batch: int, rank: int, world_size: int) -> slice:
    """This rank's contiguous part of a global batch (sizes differ by at most one)."""
    base, extra = divmod(global_batch, world_size)
    start = rank * base + min(rank, extra)
    return slice(start, start + base + (1 if rank < extra else 0))
