"""Trial parallelism: data x pipeline layouts, DDP comm hooks, mixed precision, accumulation.

Built on ``torch.distributed`` (DDP, ``DeviceMesh``, ``pipelining``, ``amp``); each module's
docstring explains its technique. :class:`Parallelism` is the per-trial entry point. The
pipeline module (which imports ``torch.distributed.pipelining``, slow to import) is loaded on
first use.

Names are loaded lazily. The layout's configuration and its torch-free checks live in
:mod:`hyperfleet.spec.trial` and :mod:`hyperfleet.spec.layout`.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "Parallelism": "api",
    "CommCounter": "comm",
    "register_comm_hook": "comm",
    "ring_all_reduce": "comm",
    "Layout": "mesh",
    "ParallelGroups": "mesh",
    "build_groups": "mesh",
    "MixedPrecision": "precision",
    "autocast": "precision",
    "StepOutcome": "step",
    "TrainStep": "step",
    "clip_grad_norm": "step",
    "wrap_model": "step",
    "ThroughputMeter": "throughput",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
