"""Ring all-reduce (hyperfleet.trials.parallel.comm) vs the backend's all-reduce, time per MB.

Runs ``--world`` gloo processes on this machine and times both on the same fp32 tensors,
interleaved, several sizes; prints milliseconds per MB and the ring/backend ratio (> 1 means the
ring is slower). Usage: ``python benchmarks/bench_ring.py [--quick] [--world 2]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hyperfleet.trials.parallel.comm import ring_all_reduce


def _time(fn, tensor: torch.Tensor, reps: int) -> float:
    times = []
    for _ in range(reps):
        dist.barrier()
        t0 = time.perf_counter()
        fn(tensor)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _worker(rank: int, world: int, rdzv: str, sizes_mb: list[float], reps: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rdzv}", rank=rank, world_size=world)
    rows = []
    for mb in sizes_mb:
        x = torch.randn(int(mb * 2**20 / 4))
        ring = _time(ring_all_reduce, x, reps)
        backend = _time(dist.all_reduce, x, reps)
        rows.append((mb, ring / mb * 1e3, backend / mb * 1e3, ring / backend))
    if rank == 0:
        print(f"world={world}  gloo on CPU  (median of {reps})")
        print(f"{'size MB':>8} {'ring ms/MB':>11} {'backend ms/MB':>14} {'ring/backend':>13}")
        for mb, r, b, ratio in rows:
            print(f"{mb:8.2f} {r:11.3f} {b:14.3f} {ratio:13.2f}")
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small sizes, few repetitions")
    ap.add_argument("--world", type=int, default=2)
    args = ap.parse_args()
    sizes = [0.25, 1.0, 4.0] if args.quick else [0.25, 1.0, 4.0, 16.0, 64.0]
    reps = 5 if args.quick else 20
    with tempfile.TemporaryDirectory() as d:
        mp.start_processes(
            _worker,
            args=(args.world, f"{d}/rdzv", sizes, reps),
            nprocs=args.world,
            start_method="spawn",
        )


if __name__ == "__main__":
    main()
