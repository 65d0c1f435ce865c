"""Pieces shared by the built-in workloads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from hyperfleet.errors import ConfigError
from hyperfleet.spec.workloads import BUILTIN


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


def unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def per_rank_batch(global_batch: int, replicas: int, accum: int) -> int:
    """Rows of one micro-batch on one data replica: ``global / (replicas * accum)``, exactly.

    An uneven split would weigh replicas' gradients unequally (DDP averages per-replica means),
    so the global batch must divide.
    """
    rows, rest = divmod(global_batch, replicas * accum)
    if rest or rows < 1:
        raise ConfigError(
            f"trial.params.batch_size: {global_batch} is not a multiple of parallel.data * "
            f"grad_accum = {replicas}*{accum}; expected a positive multiple"
        )
    return rows
