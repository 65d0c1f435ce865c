"""Checkpoint save and restore time per MB (atomic write + fsync + SHA-256, with a replica).

Saves a trial-like state (model weights plus two Adam moments) of several sizes through
``CheckpointManager`` with and without a replica directory, then restores it with
``load_latest`` (which verifies the checksum first). Prints seconds per MB and MB/s.

    python benchmarks/bench_checkpoint.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from hyperfleet.trials.checkpoint import CheckpointManager, capture_rng_state


def state_of(mb: int) -> dict[str, object]:
    n = (mb << 20) // 4 // 3
    w = torch.randn(n)
    return {
        "model": {"w": w},
        "optimizer": {"state": {"w": {"exp_avg": torch.randn(n), "exp_avg_sq": torch.rand(n)}}},
        "rng": [capture_rng_state()],
        "data": {"epoch": 0, "consumed": 123, "seed": 0, "n_items": 1000},
    }


def measure(mb: int, replica: bool, repeats: int) -> tuple[float, float, float]:
    state = state_of(mb)
    saves, loads = [], []
    with tempfile.TemporaryDirectory() as d:
        mgr = CheckpointManager(
            Path(d) / "ck", keep=2, replica=Path(d) / "rep" if replica else None
        )
        for step in range(repeats):
            t = time.perf_counter()
            path = mgr.save(step, state)
            saves.append(time.perf_counter() - t)
            t = time.perf_counter()
            assert mgr.load_latest() is not None
            loads.append(time.perf_counter() - t)
        size = path.stat().st_size / (1 << 20)
    return size, statistics.median(saves), statistics.median(loads)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="sizes 4 and 16 MB, 3 repeats")
    args = ap.parse_args()
    sizes, repeats = ([4, 16], 3) if args.quick else ([4, 32, 128], 5)
    print(
        f"{'MB':>7} {'replica':>8} {'save s/MB':>10} {'save MB/s':>10} "
        f"{'load s/MB':>10} {'load MB/s':>10}"
    )
    for mb in sizes:
        for replica in (False, True):
            size, save, load = measure(mb, replica, repeats)
            print(
                f"{size:7.1f} {replica!s:>8} {save / size:10.4f} {size / save:10.1f} "
                f"{load / size:10.4f} {size / load:10.1f}"
            )


if __name__ == "__main__":
    main()
