"""Reading and tearing down the distributed environment of a trial process.

torchrun sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``;
``init`` reads them once, picks the device (``cuda:LOCAL_RANK`` under CUDA, else CPU) and the
backend (NCCL on CUDA, gloo on CPU), and starts the default process group when there is more
than one process. ``teardown`` destroys it. Everything else asks ``DistEnv``.

``cap_memory`` keeps a trial that shares its GPU with others (``trial.resources.per_device:
K``) to its share: PyTorch's caching allocator refuses an allocation that would take this
process past ``1/K`` of the device's memory, with the same out-of-memory error as a full
device, so the trial that over-allocates fails alone while the others on the device go on.
(The cap covers what the allocator hands out; the CUDA context itself, a few hundred MB per
process, comes on top of it.)

**Without torch.** A process of one rank that can see no GPU (an in-process trial's worker:
``CUDA_VISIBLE_DEVICES`` empty) and has not imported torch yet needs none of the above:
``init`` then leaves torch unimported and names the device ``"cpu"``, a workload that never
uses torch (a scikit-learn model, a test function) runs without importing it (seconds of CPU),
and :func:`torch_device` imports it when the workload first asks for ``ctx.device``. torch
reads ``OMP_NUM_THREADS`` itself when it is imported later.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device | str  # "cpu": a process that has not imported torch (module docstring)
    backend: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def torch_device(env: DistEnv) -> torch.device:
    """``env``'s device as a ``torch.device`` (imports torch if ``init`` did not)."""
    import torch

    return env.device if isinstance(env.device, torch.device) else torch.device(env.device)


def without_torch(world: int) -> bool:
    """Whether this process can run its trial without importing torch (module docstring)."""
    no_gpu = os.environ.get("CUDA_VISIBLE_DEVICES") == ""
    return world == 1 and no_gpu and "torch" not in sys.modules


def init() -> DistEnv:
    rank = int(os.environ.get("RANK", 0))
    world = int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", 0))
    if without_torch(world):
        return DistEnv(rank, world, local, "cpu", "gloo")
    import torch
    import torch.distributed as dist

    if torch.cuda.is_available():
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    threads = os.environ.get("OMP_NUM_THREADS")
    if threads:
        torch.set_num_threads(int(threads))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend=backend, device_id=device if backend == "nccl" else None)
    return DistEnv(rank, world, local, device, backend)


def cap_memory(env: DistEnv, per_device: int) -> None:
    """Cap this process's GPU memory at ``1/per_device`` of its device (every trial sets it:
    a warm process may have run a trial with another share). Nothing on CPU."""
    if isinstance(env.device, str) or env.device.type != "cuda":
        return
    import torch

    torch.cuda.set_per_process_memory_fraction(1.0 / per_device, env.device)


def broadcast_object(obj: Any, env: DistEnv) -> Any:
    """Rank 0's ``obj`` on every rank."""
    if not env.distributed:
        return obj
    import torch.distributed as dist

    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def teardown() -> None:
    if "torch" not in sys.modules:  # never imported: no process group
        return
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
