"""Parameter-server training with asynchronous updates and bounded staleness.

``sync: {mode: allreduce | async-ps, staleness: S}``. With ``allreduce`` every rank computes a
gradient, the gradients are averaged (DDP's all-reduce) and every rank applies the same update:
one step waits for the slowest rank. With ``async-ps`` rank 0 is a *parameter server* that holds
the parameters and the optimizer; ranks 1..D-1 are *workers* that, independently of each other,

1. pull the current parameters and their version ``v`` (the count of updates applied) — the
   pull is prefetched while the previous gradient is computed, and adopted when it arrives,
2. compute a gradient on their own batch,
3. push it; the server applies it at once (one optimizer step per push, under a lock) and
   answers with its new version ``V``.

A worker keeps computing on the parameters it has until it is more than ``S`` updates behind
(``V - v > S``); then it waits for the pending pull before its next gradient (``S = 0``: wait
for fresh parameters before every step, classic asynchronous SGD; ``S = None``: never wait,
use whatever has arrived, as Hogwild-style fully asynchronous training). So every
gradient is computed on parameters at most ``S`` updates old when its step begins; what the
others apply while it computes adds to the delay with which it lands, as in any asynchronous
scheme (Downpour SGD, Dean et al. 2012; bounded delay, Li et al. 2014). A trial's ``steps`` are
server updates, shared by whichever workers deliver them.

Transport: ``torch.distributed.rpc`` (TensorPipe), which in torch 2.13 CPU works here; the
server's handlers run on RPC threads, so workers never wait for each other, only for the
server's lock while one update is applied. The RPC group needs its own rendezvous:
``env://`` under torchrun (it shares torchrun's store under a prefix) or a ``file://`` path.

When it beats all-reduce: workers of uneven or varying speed (shared or preemptible machines,
stragglers, heterogeneous devices) — a fast worker is never held back, and with one worker 5x
slower the job of N updates finishes close to the fast workers' pace (``bench_async_ps.py``);
also small models with cheap updates. When not: equal, dedicated workers on a fast
interconnect — all-reduce then wastes nothing, is bandwidth-optimal and deterministic, while the
server is a bandwidth and serialisation bottleneck (every worker moves the whole model twice per
step through one process), and stale gradients cost accuracy per update, more so with large
learning rates, momentum and many workers (digits with AdamW at lr 0.01 and staleness 2 ends
well in most runs but dips mid-run; lower the learning rate or the staleness to steady it).
Runs are not bit-reproducible (update order depends on timing), so exact checkpoint resumption
applies to ``allreduce`` only.

Configured by the trial's ``sync:`` section (:class:`hyperfleet.spec.trial.SyncConfig`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn

logger = logging.getLogger(__name__)

SERVER = "ps"


def worker_name(rank: int) -> str:
    return SERVER if rank == 0 else f"worker{rank}"


def init_rpc(rank: int, world_size: int, init_method: str = "env://", timeout: float = 300) -> None:
    """Join the RPC group as the server (rank 0) or a worker; needs ``world_size >= 2``."""
    import torch.distributed.rpc as rpc

    if world_size < 2:
        raise ValueError("async-ps needs at least 2 processes: one server and one worker")
    opts = rpc.TensorPipeRpcBackendOptions(
        init_method=init_method, rpc_timeout=timeout, num_worker_threads=max(8, 2 * world_size)
    )
    rpc.init_rpc(worker_name(rank), rank=rank, world_size=world_size, rpc_backend_options=opts)


def shutdown(graceful: bool = True) -> None:
    """Leave the RPC group: after every process has finished its calls (collective), or
    with ``graceful=False`` at once (this process is failing; a graceful shutdown would wait
    for peers that may be gone)."""
    import torch.distributed.rpc as rpc

    global _SERVER
    rpc.shutdown(graceful=graceful)
    # a next run in this process (the workload restarted after a PBT exploit) starts clean:
    # workers asking before its serve() wait for it instead of reaching this one
    _READY.clear()
    _SERVER = None


@dataclass
class ServerStats:
    updates: int = 0
    by_worker: dict[int, int] = field(default_factory=dict)
    max_delay: int = 0
    """Largest (server version at apply) - (version the gradient's parameters had)."""
    seconds: float = 0.0


class _Server:
    """The parameters, the optimizer and the update counter; called from RPC threads."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, total: int) -> None:
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer, self.total = optimizer, total
        self.due = total  # pushes wait at this version until the server has reported it
        self.version = 0
        self.stats = ServerStats()
        self.cond = threading.Condition()

    def pull(self) -> tuple[int, list[torch.Tensor]]:
        with self.cond:
            return self.version, [p.detach().clone() for p in self.params]

    def push(self, worker: int, version: int, grads: list[torch.Tensor]) -> tuple[int, bool]:
        with self.cond:
            self.cond.wait_for(lambda: self.version < min(self.due, self.total) or self.done)
            if self.version >= self.total:
                return self.version, True
            for p, g in zip(self.params, grads, strict=True):
                p.grad = g
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.stats.max_delay = max(self.stats.max_delay, self.version - version)
            self.stats.by_worker[worker] = self.stats.by_worker.get(worker, 0) + 1
            self.version += 1
            self.cond.notify_all()
            return self.version, self.version >= self.total

    @property
    def done(self) -> bool:
        return self.version >= self.total


_SERVER: _Server | None = None
_READY = threading.Event()  # set by serve(); workers may call before the server is built
_READY_TIMEOUT = 300.0


def _server() -> _Server:
    if not _READY.wait(_READY_TIMEOUT) or _SERVER is None:
        raise RuntimeError(f"no parameter server started within {_READY_TIMEOUT:g}s")
    return _SERVER


def _pull() -> tuple[int, list[torch.Tensor]]:
    return _server().pull()


def _push(worker: int, version: int, grads: list[torch.Tensor]) -> tuple[int, bool]:
    return _server().push(worker, version, grads)


def serve(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    total_updates: int,
    *,
    on_progress: Callable[[int, nn.Module], bool | None] | None = None,
    every: int = 50,
) -> ServerStats:
    """Run the parameter server (rank 0, after :func:`init_rpc`) until ``total_updates``.

    ``on_progress(version, model)`` runs on this thread every ``every`` updates and at the end,
    on a consistent snapshot (updates wait meanwhile): evaluate and report there. If it returns
    False the run ends at this version (pruned, paused): workers pushing later are told so.
    """
    global _SERVER
    server = _SERVER = _Server(model, optimizer, total_updates)  # stays for late pushes
    server.due = min(every, total_updates)
    _READY.set()
    start = time.perf_counter()
    try:
        while True:
            with server.cond:
                # pushes stop at ``due`` until it is reported, so reports land on exact versions
                server.cond.wait_for(lambda: server.version >= server.due, timeout=1.0)
                version = server.version
                if version >= server.due:
                    if on_progress is not None and on_progress(version, model) is False:
                        server.total = version  # under the lock: later pushes are refused
                    server.due = min(version + every, server.total)
                    server.cond.notify_all()
                if version >= server.total:
                    break
    finally:  # also when this thread fails (SIGTERM): pushes waiting at ``due`` must return,
        with server.cond:  # or the RPC threads they hold keep the process from exiting
            server.total = min(server.total, server.version)
            server.cond.notify_all()
    server.stats.updates = server.version
    server.stats.seconds = time.perf_counter() - start
    return server.stats


@dataclass
class WorkerStats:
    steps: int = 0
    pulls: int = 0
    waits: int = 0
    """Pulls this worker had to wait for because it was more than ``staleness`` behind."""
    seconds: float = 0.0


def work(
    rank: int,
    model: nn.Module,
    loss_fn: Callable[[nn.Module, Any], torch.Tensor],
    batches: Iterable[Any],
    staleness: int | None,
) -> WorkerStats:
    """Run a worker (rank >= 1, after :func:`init_rpc`) until the server has its updates.

    ``loss_fn(model, batch)`` returns the loss of one batch from ``batches``.
    """
    import torch
    import torch.distributed.rpc as rpc

    params = [p for p in model.parameters() if p.requires_grad]
    stats, start = WorkerStats(), time.perf_counter()
    version, known, pending = -1, 0, None
    for batch in batches:
        if pending is None:  # prefetch the next parameters while computing
            pending = rpc.rpc_async(SERVER, _pull)
        behind = version < 0 or (staleness is not None and known - version > staleness)
        if behind or pending.done():
            stats.waits += int(behind and not pending.done())
            version, weights = pending.wait()
            pending = None
            with torch.no_grad():
                for p, w in zip(params, weights, strict=True):
                    p.copy_(w)
            stats.pulls += 1
        model.zero_grad(set_to_none=True)
        loss_fn(model, batch).backward()
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        known, done = rpc.rpc_sync(SERVER, _push, args=(rank, version, grads))
        stats.steps += 1
        if done:
            break
    if pending is not None:
        pending.wait()
    stats.seconds = time.perf_counter() - start
    return stats
