"""Full trial state that doesn't depend on the world size: save at D ranks, resume at D'.

The model and optimizer go through ``torch.distributed.checkpoint.state_dict``:
``get_state_dict(..., full_state_dict=True, cpu_offload=True)`` gives rank 0 the consolidated,
unwrapped state (keys are parameter names without DDP's ``module.`` prefix, optimizer state
keyed by those names rather than by position), and ``set_state_dict(...,
broadcast_from_rank0=True)`` loads it into a model of any layout on any number of ranks: rank 0
reads the file, the library broadcasts each tensor and every rank keeps its part. Under DDP,
where parameters are replicated, that is the whole resharding problem; the same calls gather and
re-split FSDP shards. (For models too large to gather on one rank, ``dcp.save``/``dcp.load`` of
the sharded state is the next step; the consolidated file keeps one checksummed, replicated
artifact per step, which is what PBT copies between members.)

Two pieces of the trial state are per rank and are handled here:

* **data position** — the loaders' position is one global count of the epoch's order (see
  :mod:`hyperfleet.trials.data.sampler`), so the new ranks split what is left of the epoch;
* **RNG states** — rank 0 gathers every rank's generators. At the same world size rank ``r``
  gets its own back, which makes a resumed run bit-identical to an uninterrupted one; at a new
  world size ranks below the old size take theirs and the others are seeded from
  ``(step, rank)``.

Saving writes one file through :class:`~hyperfleet.trials.checkpoint.CheckpointManager`
(atomic, checksummed, replicated, last K kept). Both functions are collective when a process
group is initialized and work in a single process without one.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from hyperfleet.trials.checkpoint import CheckpointManager, capture_rng_state, restore_rng_state

logger = logging.getLogger(__name__)

STATE_VERSION = 1


class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> Any: ...


def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def build_trial_state(
    step: int,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scaler: Stateful | None = None,
    scheduler: Stateful | None = None,
    loader: Stateful | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The full trial state on rank 0 (None on the other ranks). Collective."""
    rank, world = _world()
    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    if optimizer is not None:
        model_sd, optim_sd = get_state_dict(model, optimizer, options=opts)
    else:
        model_sd, optim_sd = get_model_state_dict(model, options=opts), None
    rngs: list[Any] = [capture_rng_state()]
    if world > 1:
        gathered: list[Any] | None = [None] * world if rank == 0 else None
        dist.gather_object(rngs[0], gathered, dst=0)
        rngs = gathered or []
    if rank != 0:
        return None
    return {
        "version": STATE_VERSION,
        "step": step,
        "world_size": world,
        "model": model_sd,
        "optimizer": optim_sd,
        "scaler": scaler.state_dict() if scaler is not None else None,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "data": loader.state_dict() if loader is not None else None,
        "rng": rngs,
        "extra": dict(extra or {}),
    }


def save_trial_state(manager: CheckpointManager, step: int, **parts: Any) -> Path | None:
    """Build the trial state (see :func:`build_trial_state`) and have rank 0 save it.

    Collective; returns the checkpoint's path on rank 0 and None elsewhere, after every rank
    knows the file is complete.
    """
    state = build_trial_state(step, **parts)
    path = manager.save(step, state) if state is not None else None
    if _world()[1] > 1:
        dist.barrier()
    return path


def _restore_rng(rngs: list[Any], step: int, rank: int) -> None:
    if rank < len(rngs):
        restore_rng_state(rngs[rank])
        return
    seed = (step * 1_000_003 + rank) % (1 << 31)
    logger.info("rank %d has no saved RNG state (saved at %d ranks); seeding", rank, len(rngs))
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def restore_trial_state(
    state: dict[str, Any] | None,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scaler: Stateful | None = None,
    scheduler: Stateful | None = None,
    loader: Stateful | None = None,
) -> tuple[int, dict[str, Any]]:
    """Load ``state`` into the given objects; returns ``(step, extra)``. Collective.

    With a process group, only rank 0 needs ``state`` to hold the model and optimizer (the
    other ranks may pass the same dict or the small part without them); tensors come from rank
    0 by broadcast.
    """
    rank, world = _world()
    if world > 1:
        meta = {k: v for k, v in (state or {}).items() if k not in ("model", "optimizer")}
        box = [meta if rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        meta = box[0]
        opts = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    else:
        assert state is not None, "a single process needs the state"
        meta, opts = state, StateDictOptions(full_state_dict=True)
    if meta.get("version") != STATE_VERSION:
        raise ValueError(f"trial state version {meta.get('version')}, expected {STATE_VERSION}")
    # Model and optimizer separately: ``set_state_dict`` treats an empty model dict (what the
    # ranks other than 0 pass with ``broadcast_from_rank0``) as "optimizer only".
    full = state is not None and rank == 0
    set_model_state_dict(model, state["model"] if full else {}, options=opts)  # type: ignore[index]
    if optimizer is not None:
        optim_sd = state["optimizer"] if full else {}  # type: ignore[index]
        set_optimizer_state_dict(model, optimizer, optim_sd, options=opts)
    for obj, key in ((scaler, "scaler"), (scheduler, "scheduler"), (loader, "data")):
        if obj is not None and meta.get(key) is not None:
            obj.load_state_dict(meta[key])
    step = int(meta["step"])
    _restore_rng(meta["rng"], step, rank)
    if meta["world_size"] != world:
        logger.info(
            "resumed step %d saved at %d ranks on %d ranks", step, meta["world_size"], world
        )
    return step, meta["extra"]


def load_trial_state(manager: CheckpointManager, **parts: Any) -> tuple[int, dict[str, Any]] | None:
    """Restore the newest intact checkpoint into ``parts``; ``(step, extra)`` or None. Collective.

    Rank 0 picks the step (skipping corrupt ones, falling back to the replica) and reads it;
    every rank then loads the same step.
    """
    rank, world = _world()
    state: dict[str, Any] | None = None
    if rank == 0:
        found = manager.load_latest()
        state = found[1] if found is not None else None
    if world > 1:
        box = [state is not None]
        dist.broadcast_object_list(box, src=0)
        present = bool(box[0])
    else:
        present = state is not None
    if not present:
        return None
    return restore_trial_state(state, **parts)
