"""Gradient communication across the data axis: DDP communication hooks and a ring all-reduce.

DDP groups gradients into buckets of about ``bucket_mb`` MB and, as each bucket fills during
backward, hands it to a *communication hook* that must return a future of the averaged bucket.
``CommConfig.hook`` selects one:

* ``allreduce`` - the backend's all-reduce (DDP's default; no Python hook is registered unless
  all-reduces are being counted);
* ``fp16`` / ``bf16`` - torch's compression hooks: cast to 16 bits, all-reduce, cast back
  (half the bytes on the wire, at some precision);
* ``powersgd`` - torch's PowerSGD: after ``powersgd_start_iter`` plain steps, each gradient
  matrix is sent as a rank-``r`` product ``P Q^T`` with error feedback;
* ``ring`` - :func:`ring_all_reduce`, the textbook bandwidth-optimal algorithm, written out.

Ring all-reduce over ``n`` ranks splits the tensor into ``n`` chunks. *Reduce-scatter*: in
``n - 1`` steps each rank sends one chunk to its right neighbour and adds the chunk arriving from
its left one; afterwards rank ``r`` holds the full sum of chunk ``r + 1``. *All-gather*: in
``n - 1`` more steps the summed chunks travel once around the ring. Each rank sends
``2 (n - 1) / n`` times the tensor's size, whatever ``n`` is.
"""

# No ``from __future__ import annotations``: DDP compares a hook's annotations with the real
# ``dist.GradBucket`` / ``Future[Tensor]`` objects.
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel

from hyperfleet.spec.trial import CommConfig

log = logging.getLogger(__name__)

CommHook = Callable[[Any, dist.GradBucket], torch.futures.Future[torch.Tensor]]


def ring_all_reduce(tensor: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Sum ``tensor`` in place across ``group`` with a ring of point-to-point sends; return it.

    Works for any size: chunks are as equal as ``torch.tensor_split`` makes them (sizes that do
    not divide by the group size give chunks one element apart; empty chunks are skipped).
    """
    n = dist.get_world_size(group)
    if n == 1:
        return tensor
    rank = dist.get_rank(group)
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.reshape(-1).clone()
    chunks = list(torch.tensor_split(flat, n))
    right = dist.get_global_rank(group, (rank + 1) % n) if group is not None else (rank + 1) % n
    left = dist.get_global_rank(group, (rank - 1) % n) if group is not None else (rank - 1) % n
    scratch = torch.empty_like(chunks[0])
    for step in range(n - 1):  # reduce-scatter
        send = chunks[(rank - step) % n]
        recv = chunks[(rank - step - 1) % n]
        buf = scratch[: recv.numel()]
        _exchange(send, buf, right, left, group)
        recv.add_(buf)
    for step in range(n - 1):  # all-gather
        send = chunks[(rank + 1 - step) % n]
        recv = chunks[(rank - step) % n]
        _exchange(send, recv, right, left, group)
    if flat.data_ptr() != tensor.data_ptr():
        tensor.copy_(flat.view_as(tensor))
    return tensor


def _exchange(
    send: torch.Tensor,
    recv: torch.Tensor,
    right: int,
    left: int,
    group: dist.ProcessGroup | None,
) -> None:
    """Send ``send`` to the right neighbour while receiving ``recv`` from the left one."""
    ops = []
    if send.numel():
        ops.append(dist.P2POp(dist.isend, send, right, group))
    if recv.numel():
        ops.append(dist.P2POp(dist.irecv, recv, left, group))
    if ops:
        for work in dist.batch_isend_irecv(ops):
            work.wait()


def ring_hook(
    group: dist.ProcessGroup | None, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: average the bucket with :func:`ring_all_reduce`."""
    buffer = bucket.buffer()
    ring_all_reduce(buffer, group)
    buffer.div_(dist.get_world_size(group))
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(buffer)
    return fut


@dataclass
class CommCounter:
    """Counts the buckets DDP hands to its communication hook (one per all-reduce)."""

    calls: int = 0
    elements: int = 0


def _counting(hook: CommHook, counter: CommCounter) -> CommHook:
    def counted(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        counter.calls += 1
        counter.elements += bucket.buffer().numel()
        return hook(state, bucket)

    return counted


def register_comm_hook(
    ddp: DistributedDataParallel,
    comm: CommConfig,
    group: dist.ProcessGroup | None,
    counter: CommCounter | None = None,
) -> object | None:
    """Register ``comm.hook`` on ``ddp`` (optionally counted); return the hook's state.

    The state must be kept for as long as the model trains (PowerSGD keeps its error feedback
    and warm-start matrices there).
    """
    group = group if group is not None else dist.group.WORLD
    state: object | None = group
    hook: CommHook
    if comm.hook == "allreduce":
        if counter is None:
            return None  # DDP's built-in C++ all-reduce
        hook = default_hooks.allreduce_hook
    elif comm.hook == "ring":
        hook = ring_hook
    elif comm.hook == "fp16":
        hook = default_hooks.fp16_compress_hook
    elif comm.hook == "bf16":
        hook = default_hooks.bf16_compress_hook
    elif comm.hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(
            process_group=group,
            matrix_approximation_rank=comm.powersgd_rank,
            start_powerSGD_iter=comm.powersgd_start_iter,
        )
        hook = powerSGD_hook.powerSGD_hook
    else:  # pragma: no cover - pydantic's Literal forbids it
        raise ValueError(f"unknown comm hook {comm.hook!r}")
    ddp.register_comm_hook(state, _counting(hook, counter) if counter is not None else hook)
    log.debug("registered DDP comm hook %s", comm.hook)
    return state
