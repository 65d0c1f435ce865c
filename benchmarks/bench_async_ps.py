"""async-ps vs all-reduce with one worker slowed 5x (digits MLP, 2 workers, CPU/gloo).

All-reduce: 2 ranks, every step both compute a gradient, average it with ``all_reduce`` and
apply the same update: each step waits for the slow rank. async-ps: a server plus 2 workers,
the same total number of gradients (2 per all-reduce step), each applied on arrival. The
slowness is a sleep per step: ``--delay`` ms for the fast worker, 5x that for the slow one.
Prints wall time of the training phase, validation accuracy and the ratio.

    python benchmarks/bench_async_ps.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import pickle
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from hyperfleet.trials import async_ps
from hyperfleet.trials.data import ArrayLoader

SLOW = 5


def _setup() -> tuple[Any, ...]:
    from tests.trials.test_async_ps import accuracy, digits, mlp, xent

    return digits(), mlp, xent, accuracy


def _slowed(loader: ArrayLoader, delay: float):
    for batch in loader:
        time.sleep(delay)
        yield batch


def allreduce(rank: int, world: int, rdzv: str, steps: int, delay: float) -> dict[str, float]:
    (x_tr, ytr, x_va, yva), mlp, xent, accuracy = _setup()
    dist.init_process_group(
        "gloo",
        init_method=f"file://{rdzv}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=120),
    )
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    loader = ArrayLoader([x_tr, ytr], batch_size=32, rank=rank, world_size=world, seed=0)
    batches = _slowed(loader, delay * (SLOW if rank == world - 1 else 1))
    dist.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        xent(model, next(batches)).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
    seconds = time.perf_counter() - start
    dist.destroy_process_group()
    return {"seconds": seconds, "accuracy": accuracy(model, x_va, yva)}


def asyncps(rank: int, world: int, rdzv: str, steps: int, delay: float) -> dict[str, float]:
    (x_tr, ytr, x_va, yva), mlp, xent, accuracy = _setup()
    async_ps.init_rpc(rank, world, init_method=f"file://{rdzv}")
    try:
        model = mlp()
        if rank == 0:
            opt = torch.optim.Adam(model.parameters(), lr=3e-3)
            stats = async_ps.serve(model, opt, steps * (world - 1), every=10**9)
            return {
                "seconds": stats.seconds,
                "accuracy": accuracy(model, x_va, yva),
                "max_delay": stats.max_delay,
                **{f"by_worker{k}": v for k, v in stats.by_worker.items()},
            }
        loader = ArrayLoader(
            [x_tr, ytr], batch_size=32, rank=rank - 1, world_size=world - 1, seed=0
        )
        batches = _slowed(loader, delay * (SLOW if rank == world - 1 else 1))
        async_ps.work(rank, model, xent, batches, staleness=STALENESS)
        return {}
    finally:
        async_ps.shutdown()


STALENESS: int | None = 4


def _entry(rank: int, fn_name: str, world: int, d: str, steps: int, delay: float, s: Any) -> None:
    global STALENESS
    STALENESS = s
    torch.set_num_threads(1)
    out = globals()[fn_name](rank, world, f"{d}/rdzv", steps, delay)
    Path(f"{d}/out-{rank}.pkl").write_bytes(pickle.dumps(out))


def run(fn_name: str, world: int, steps: int, delay: float, staleness: int | None) -> dict:
    with tempfile.TemporaryDirectory() as d:
        mp.start_processes(
            _entry,
            args=(fn_name, world, d, steps, delay, staleness),
            nprocs=world,
            start_method="spawn",
        )
        return pickle.loads(Path(f"{d}/out-0.pkl").read_bytes())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="60 all-reduce steps")
    ap.add_argument("--steps", type=int, default=300, help="all-reduce steps (x2 gradients)")
    ap.add_argument("--delay", type=float, default=10.0, help="fast worker's ms per step")
    ap.add_argument("--staleness", type=int, default=4)
    args = ap.parse_args()
    steps = 60 if args.quick else args.steps
    delay = args.delay / 1000
    os.environ.setdefault("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    ar = run("allreduce", 2, steps, delay, None)
    ps = run("asyncps", 3, steps, delay, args.staleness)
    print(
        f"2 workers, one {SLOW}x slower ({args.delay:g} ms vs {args.delay * SLOW:g} ms per step); "
        f"{2 * steps} gradients each way"
    )
    print(f"all-reduce: {ar['seconds']:7.2f} s  val_accuracy {ar['accuracy']:.3f}")
    print(
        f"async-ps:   {ps['seconds']:7.2f} s  val_accuracy {ps['accuracy']:.3f}  "
        f"(staleness {args.staleness}; updates by worker: fast {ps.get('by_worker1', 0)}, "
        f"slow {ps.get('by_worker2', 0)}; max delay {ps['max_delay']})"
    )
    print(f"all-reduce / async-ps time: {ar['seconds'] / ps['seconds']:.2f}x")


if __name__ == "__main__":
    main()
