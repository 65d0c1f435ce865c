"""Trial parallelism: data x pipeline layouts, DDP comm hooks, mixed precision, accumulation.

Built on ``torch.distributed`` (DDP, ``DeviceMesh``, ``pipelining``, ``amp``); each module's
docstring explains its technique. :class:`Parallelism` is the per-trial entry point. The
pipeline module (which imports ``torch.distributed.pipelining``, slow to import) is loaded on
first use.
"""

from hyperfleet.trials.parallel.api import Parallelism
from hyperfleet.trials.parallel.comm import CommCounter, register_comm_hook, ring_all_reduce
from hyperfleet.trials.parallel.config import (
    CommConfig,
    ParallelConfig,
    Precision,
    check_layout,
    validate_comm,
    validate_layout,
)
from hyperfleet.trials.parallel.mesh import Layout, ParallelGroups, build_groups
from hyperfleet.trials.parallel.precision import MixedPrecision, autocast
from hyperfleet.trials.parallel.step import StepOutcome, TrainStep, clip_grad_norm, wrap_model
from hyperfleet.trials.parallel.throughput import ThroughputMeter

__all__ = [
    "CommConfig",
    "CommCounter",
    "Layout",
    "MixedPrecision",
    "ParallelConfig",
    "ParallelGroups",
    "Parallelism",
    "Precision",
    "StepOutcome",
    "ThroughputMeter",
    "TrainStep",
    "autocast",
    "build_groups",
    "check_layout",
    "clip_grad_norm",
    "register_comm_hook",
    "ring_all_reduce",
    "validate_comm",
    "validate_layout",
    "wrap_model",
]
