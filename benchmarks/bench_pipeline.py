"""Measured pipeline idle fraction vs the bubble bound (P - 1) / (M + P - 1).

``P`` gloo processes each hold one stage of a stack of equal MLP blocks (so stages cost the
same, the bound's assumption). For each schedule and ``M`` in {2, 4, 8} micro-batches (same
micro-batch size, so more work per step as M grows), it times pipeline steps and, inside them,
the wall time each stage spends computing its forwards and backwards (*busy*, recorded by a
wrapper around the stage and an identity autograd function at its boundaries):
``idle = 1 - busy / step``, averaged over stages. Communication time counts as idle.
Usage: ``python benchmarks/bench_pipeline.py [--quick] [--stages 2]``.
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
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hyperfleet.spec.trial import CommConfig, ParallelConfig
from hyperfleet.trials.parallel import MixedPrecision
from hyperfleet.trials.parallel.mesh import Layout, build_groups
from hyperfleet.trials.parallel.pipeline import PipelineRunner

WIDTH, MB_ROWS = 512, 128


class _Mark(torch.autograd.Function):
    """Identity whose backward timestamps the stage's backward (start at output, end at input)."""

    @staticmethod
    def forward(ctx, x, timed, end):
        ctx.timed, ctx.end = timed, end
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        now = time.perf_counter()
        if ctx.end:
            ctx.timed.busy += now - ctx.timed.bwd_start
        else:
            ctx.timed.bwd_start = now
        return grad, None, None


class _Timed(nn.Module):
    """A stage's layers that add their forward and backward wall time to ``busy``."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.busy = 0.0
        self.bwd_start = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _Mark.apply(x.detach().requires_grad_() if not x.requires_grad else x, self, True)
        t0 = time.perf_counter()
        y = self.inner(x)
        self.busy += time.perf_counter() - t0
        return _Mark.apply(y, self, False)


def _layers(n: int, per_stage: int) -> list[nn.Module]:
    torch.manual_seed(0)
    return [
        _Timed(
            nn.Sequential(
                *(nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()) for _ in range(per_stage))
            )
        )
        for _ in range(n)
    ]


def _mse(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(out, target)


def _worker(rank: int, world: int, rdzv: str, reps: int, layers_per_stage: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rdzv}", rank=rank, world_size=world)
    cpu = torch.device("cpu")
    rows = []
    for schedule in ("gpipe", "1f1b"):
        for m in (2, 4, 8):
            par = ParallelConfig(pipeline=world, microbatches=m, schedule=schedule)  # type: ignore[arg-type]
            groups = build_groups(Layout.from_config(par, world), "cpu")
            layers = _layers(world, layers_per_stage)
            runner = PipelineRunner(
                layers,
                _mse,
                lambda ps: torch.optim.SGD(ps, lr=1e-3),
                par,
                CommConfig(),
                groups,
                MixedPrecision("fp32", cpu),
                cpu,
            )
            x, y = torch.randn(m * MB_ROWS, WIDTH), torch.randn(m * MB_ROWS, WIDTH)
            runner.forward_backward(x, y)  # warm-up (builds the schedule)
            timed = layers[runner.stage_ids[0]]
            steps, busy = [], []
            for _ in range(reps):
                dist.barrier()
                timed.busy = 0.0
                t0 = time.perf_counter()
                runner.forward_backward(x, y)
                steps.append(time.perf_counter() - t0)
                busy.append(timed.busy)
            idle = statistics.median(1 - b / t for b, t in zip(busy, steps, strict=True))
            t = torch.tensor([idle])
            dist.all_reduce(t)
            rows.append((schedule, m, float(t) / world, (world - 1) / (m + world - 1)))
    if rank == 0:
        print(f"P={world} stages, equal-cost MLP stages, gloo on CPU, median of {reps}")
        print(f"{'schedule':>9} {'M':>3} {'measured idle':>14} {'bound (P-1)/(M+P-1)':>20}")
        for schedule, m, idle, bound in rows:
            print(f"{schedule:>9} {m:>3} {idle:14.3f} {bound:20.3f}")
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--stages", type=int, default=2)
    args = ap.parse_args()
    reps = 5 if args.quick else 20
    with tempfile.TemporaryDirectory() as d:
        mp.start_processes(
            _worker,
            args=(args.stages, f"{d}/rdzv", reps, 4),
            nprocs=args.stages,
            start_method="spawn",
        )


if __name__ == "__main__":
    main()
