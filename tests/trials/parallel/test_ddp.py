"""Data parallelism, gradient accumulation and mixed precision on real gloo processes."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist

from hyperfleet.spec.trial import CommConfig
from hyperfleet.trials.parallel.comm import CommCounter
from hyperfleet.trials.parallel.precision import MixedPrecision
from hyperfleet.trials.parallel.step import TrainStep, wrap_model
from tests.dist import run_distributed
from tests.trials.parallel.common import assert_close_dicts, batch, gpt_loss, params, tiny_gpt

CPU = torch.device("cpu")
GLOBAL_BATCH = 8


def _train(
    model: torch.nn.Module,
    grad_accum: int,
    steps: int,
    rank: int,
    world: int,
    precision: str = "fp32",
    lr: float = 0.05,
) -> tuple[TrainStep, list[float]]:
    """``steps`` steps; each rank takes its slice of each global batch, in K micro-batches."""
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    group = dist.group.WORLD if world > 1 else None
    ts = TrainStep(model, opt, MixedPrecision(precision, CPU), grad_accum, 1.0, loss_group=group)
    losses = []
    for step in range(steps):
        x, y = batch(GLOBAL_BATCH * grad_accum, seed=step)
        x, y = x.chunk(world)[rank], y.chunk(world)[rank]
        micro = list(zip(x.chunk(grad_accum), y.chunk(grad_accum), strict=True))
        out = ts.run(micro, lambda b: gpt_loss(model(b[0]), b[1]))
        losses.append(out.loss)
    return ts, losses


def _reference(grad_accum: int, steps: int) -> tuple[dict[str, torch.Tensor], list[float]]:
    model = tiny_gpt()
    _, losses = _train(model, grad_accum, steps, 0, 1)
    return params(model), losses


def _ddp_worker(rank: int, world: int, grad_accum: int, steps: int) -> tuple[dict, list, int]:
    counter = CommCounter()
    model, _ = wrap_model(tiny_gpt(), CommConfig(), CPU, dist.group.WORLD, counter)
    _, losses = _train(model, grad_accum, steps, rank, world)
    return params(model), losses, counter.calls


def test_ddp_two_ranks_match_one_process_on_the_same_global_batch() -> None:
    ref, ref_losses = _reference(1, 5)
    results = run_distributed(_ddp_worker, 2, 1, 5)
    for p, losses, _ in results:
        assert_close_dicts(p, ref, rtol=1e-5, atol=1e-6)
        assert losses == results[0][1]
        torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses))


def test_grad_accum_matches_one_large_batch_single_process() -> None:
    big = tiny_gpt()
    _train(big, 1, 3, 0, 1)
    # the same 4x batches, taken as 4 micro-batches of each step
    acc = tiny_gpt()
    opt = torch.optim.SGD(acc.parameters(), lr=0.05, momentum=0.9)
    ts = TrainStep(acc, opt, MixedPrecision("fp32", CPU), grad_accum=4, grad_clip=1.0)
    for step in range(3):
        x, y = batch(GLOBAL_BATCH, seed=step)
        for xm, ym in zip(x.chunk(4), y.chunk(4), strict=True):
            out = ts.backward_step(gpt_loss(acc(xm), ym))
        assert out is not None
    assert_close_dicts(params(acc), params(big), rtol=1e-5, atol=1e-6)


def test_grad_accum_with_ddp_all_reduces_only_on_the_last_micro_step() -> None:
    ref_big = tiny_gpt()
    _train(ref_big, 4, 3, 0, 1)  # K=4 on one process == one 4x batch (previous test)
    results = run_distributed(_accum_counting_worker, 2)
    for p, counts in results:
        assert_close_dicts(p, params(ref_big), rtol=1e-5, atol=1e-6)
        before_last, after_last = counts
        assert before_last == [0, 0, 0], "non-final micro-steps must not all-reduce"
        assert after_last > 0, "the last micro-step must all-reduce"


def _accum_counting_worker(rank: int, world: int) -> tuple[dict, tuple[list[int], int]]:
    counter = CommCounter()
    # small buckets: several all-reduces per sync
    model, _ = wrap_model(tiny_gpt(), CommConfig(bucket_mb=0.01), CPU, dist.group.WORLD, counter)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ts = TrainStep(model, opt, MixedPrecision("fp32", CPU), 4, 1.0)
    for step in range(3):
        x, y = batch(GLOBAL_BATCH * 4, seed=step)
        x, y = x.chunk(world)[rank], y.chunk(world)[rank]
        seen = []
        for i, (xm, ym) in enumerate(zip(x.chunk(4), y.chunk(4), strict=True)):
            start = counter.calls
            ts.backward_step(gpt_loss(model(xm), ym))
            if i < 3:
                seen.append(counter.calls - start)
        last = counter.calls - start
    return params(model), (seen, last)


def _overflow_worker(rank: int, world: int) -> dict:
    model, _ = wrap_model(tiny_gpt(), CommConfig(), CPU, dist.group.WORLD)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    mp = MixedPrecision("fp16", CPU, init_scale=1024.0)  # real float16 autocast on CPU
    ts = TrainStep(model, opt, mp, 1, 1.0)
    bad_step = 1

    def inject(m: torch.nn.Module) -> None:
        if rank == 1 and ts_state["step"] == bad_step:
            next(m.parameters()).grad.view(-1)[0] = float("inf")

    ts_state = {"step": 0}
    ts.grad_hook = inject
    skipped, scales, snapshots = [], [], []
    for step in range(3):
        ts_state["step"] = step
        before = params(model)
        x, y = batch(4, seed=10 * step + rank)
        out = ts.run([(x, y)], lambda b: gpt_loss(model(b[0]), b[1]))
        skipped.append(out.skipped)
        scales.append(mp.loss_scale)
        snapshots.append(all(torch.equal(before[k], v) for k, v in params(model).items()))
    return {"skipped": skipped, "scales": scales, "unchanged": snapshots, "params": params(model)}


def test_injected_overflow_on_one_rank_makes_every_rank_skip_the_same_step() -> None:
    r0, r1 = run_distributed(_overflow_worker, 2)
    assert r0["skipped"] == r1["skipped"] == [False, True, False]
    assert r0["unchanged"] == r1["unchanged"] == [False, True, False]
    assert r0["scales"] == r1["scales"] == [1024.0, 512.0, 512.0]
    assert_close_dicts(r0["params"], r1["params"], rtol=0, atol=0)


def _mixed_worker(rank: int, world: int, precision: str) -> dict[str, Any]:
    model, _ = wrap_model(tiny_gpt(), CommConfig(), CPU, dist.group.WORLD)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    mp = MixedPrecision(precision, CPU)  # type: ignore[arg-type]
    ts = TrainStep(model, opt, mp, 2, 1.0, loss_group=dist.group.WORLD)
    x, y = batch(16, seed=3)  # one fixed batch: the loss must go down
    x, y = x.chunk(world)[rank], y.chunk(world)[rank]
    micro = list(zip(x.chunk(2), y.chunk(2), strict=True))
    with torch.no_grad(), mp.autocast():
        dtype = model(micro[0][0]).dtype
    outs = [ts.run(micro, lambda b: gpt_loss(model(b[0]), b[1])) for _ in range(15)]
    return {"losses": [o.loss for o in outs], "dtype": str(dtype), "scale": mp.loss_scale}


@pytest.mark.parametrize(("precision", "scaled"), [("bf16", False), ("fp16", True)])
def test_mixed_precision_training_decreases_the_loss(precision: str, scaled: bool) -> None:
    r0, r1 = run_distributed(_mixed_worker, 2, precision)
    assert r0["losses"] == r1["losses"]
    assert r0["losses"][-1] < 0.8 * r0["losses"][0], r0["losses"]
    assert r0["dtype"] == {"bf16": "torch.bfloat16", "fp16": "torch.float16"}[precision]
    assert (r0["scale"] > 1.0) is scaled  # fp16 scales the loss (GradScaler), bf16 doesn't
