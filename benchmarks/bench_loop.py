"""The trial loop's throughput (Parallelism / TrainStep) over a hand-written PyTorch loop.

Same model (charlm's GPT), same data, same optimizer, same work per step (``K`` micro-batches,
loss / K, clip, AdamW step, zero grads); the two loops alternate step by step so that machine
load hits both alike. Prints steps/s of each and ``trainstep / hand`` (goal >= 0.97) by wall
clock and by process CPU time (steadier on a shared machine).
With ``--data 2`` both run as DDP on two gloo processes (the hand loop uses ``no_sync``).
Usage: ``python benchmarks/bench_loop.py [--quick] [--data 1] [--accum 2]``.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn import functional as F  # noqa: N812
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hyperfleet.spec.trial import CommConfig, ParallelConfig
from hyperfleet.trials.models.gpt import GPT, GPTConfig
from hyperfleet.trials.parallel import Parallelism

CFG = GPTConfig(vocab_size=256, seq_len=64, n_layer=2, n_head=4, n_embd=128)
CPU = torch.device("cpu")


def _loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def _data(n: int, rows: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        d = torch.randint(0, 256, (rows, CFG.seq_len + 1), generator=g)
        out.append((d[:, :-1], d[:, 1:]))
    return out


def _hand(model: torch.nn.Module, opt: torch.optim.Optimizer, micro: list, k: int) -> None:
    for i, (x, y) in enumerate(micro):
        sync = not isinstance(model, DistributedDataParallel) or i == k - 1
        with contextlib.nullcontext() if sync else model.no_sync():
            loss = _loss(model(x), y) / k
            loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def _ours(
    par: Parallelism, model: torch.nn.Module, opt: torch.optim.Optimizer, micro: list
) -> None:
    for x, y in micro:
        with par.autocast():
            loss = _loss(model(x), y)
        par.backward_step(loss, opt)


def _run(rank: int, world: int, rdzv: str | None, steps: int, k: int) -> None:
    torch.set_num_threads(1)  # one core per rank: CPU time then measures this loop alone
    if rdzv:
        dist.init_process_group("gloo", init_method=f"file://{rdzv}", rank=rank, world_size=world)
    par = Parallelism(
        ParallelConfig(data=world), CommConfig(), "fp32", CPU, grad_accum=k, grad_clip=1.0
    )
    torch.manual_seed(0)
    ours = par.wrap(GPT(CFG))
    torch.manual_seed(0)
    hand = GPT(CFG)
    hand = DistributedDataParallel(hand) if world > 1 else hand
    opt_ours = torch.optim.AdamW(ours.parameters(), lr=1e-3)
    opt_hand = torch.optim.AdamW(hand.parameters(), lr=1e-3)
    data = _data(k, 8)
    t_hand: dict[str, list[float]] = {"wall": [], "cpu": []}
    t_ours: dict[str, list[float]] = {"wall": [], "cpu": []}
    for step in range(steps + 2):  # alternate every step, in alternating order; 2 warm-ups
        for name in ("hand", "ours") if step % 2 else ("ours", "hand"):
            if rdzv:
                dist.barrier()
            w0, c0 = time.perf_counter(), time.process_time()
            if name == "hand":
                _hand(hand, opt_hand, data, k)
            else:
                _ours(par, ours, opt_ours, data)
            if step >= 2:
                into = t_hand if name == "hand" else t_ours
                into["wall"].append(time.perf_counter() - w0)
                into["cpu"].append(time.process_time() - c0)
    if rank == 0:
        print(f"data={world} grad_accum={k} fp32, {steps} steps each, alternating (medians)")
        for clock in ("wall", "cpu"):
            h, o = statistics.median(t_hand[clock]), statistics.median(t_ours[clock])
            print(
                f"{clock:>4} time: hand {1 / h:7.2f} steps/s, TrainStep {1 / o:7.2f} steps/s, "
                f"ratio trainstep/hand = {h / o:.3f}  (goal >= 0.97)"
            )
    if rdzv:
        dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--data", type=int, default=1)
    ap.add_argument("--accum", type=int, default=2)
    args = ap.parse_args()
    steps = 20 if args.quick else 100
    if args.data == 1:
        _run(0, 1, None, steps, args.accum)
        return
    with tempfile.TemporaryDirectory() as d:
        mp.start_processes(
            _run,
            args=(args.data, f"{d}/rdzv", steps, args.accum),
            nprocs=args.data,
            start_method="spawn",
        )


if __name__ == "__main__":
    main()
