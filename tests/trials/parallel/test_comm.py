"""Ring all-reduce and DDP communication hooks against the backend's all-reduce."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from hyperfleet.spec.trial import CommConfig
from hyperfleet.trials.parallel.comm import CommCounter, ring_all_reduce
from hyperfleet.trials.parallel.step import wrap_model
from tests.dist import run_distributed
from tests.trials.parallel.common import batch, gpt_loss, tiny_gpt

CPU = torch.device("cpu")
SIZES = [1, 2, 7, 8, 9, 1000, 1001, 4099]  # smaller than, equal to, not divisible by the world


def _ring_worker(rank: int, world: int) -> dict[str, object]:
    out: dict[str, object] = {}
    for n in SIZES:
        g = torch.Generator().manual_seed(100 * rank + n)
        x = torch.randn(n, generator=g, dtype=torch.float64)
        expected = x.clone()
        dist.all_reduce(expected)
        got = ring_all_reduce(x.clone())
        out[f"flat-{n}"] = (got, expected)
    m = torch.randn(5, 3, generator=torch.Generator().manual_seed(rank)).t()  # non-contiguous
    expected = m.clone()
    dist.all_reduce(expected)
    out["noncontiguous"] = (ring_all_reduce(m), expected)
    # a subgroup: ring over ranks {0, world-1} only
    sub = dist.new_group([0, world - 1])
    if rank in (0, world - 1):
        y = torch.full((5,), float(rank + 1))
        out["subgroup"] = (ring_all_reduce(y, sub), torch.full((5,), float(world + 1)))
    return out


@pytest.mark.parametrize("world", [2, 3])
def test_ring_all_reduce_equals_backend_all_reduce(world: int) -> None:
    for result in run_distributed(_ring_worker, world):
        for name, (got, expected) in result.items():
            torch.testing.assert_close(got, expected, msg=lambda m, n=name: f"{n}: {m}")


def _grads(hook: str, bucket_mb: float, rank: int, world: int) -> tuple[dict, list[int]]:
    counter = CommCounter()
    comm = CommConfig(hook=hook, bucket_mb=bucket_mb)  # type: ignore[arg-type]
    model, _ = wrap_model(tiny_gpt(), comm, CPU, dist.group.WORLD, counter)
    x, y = batch(4 * world, seed=5)
    for _ in range(2):  # DDP sizes its buckets by bucket_mb from the second iteration on
        model.zero_grad()
        before = counter.calls
        gpt_loss(model(x.chunk(world)[rank]), y.chunk(world)[rank]).backward()
    counter.calls -= before
    grads = {k: p.grad.clone() for k, p in model.module.named_parameters()}
    return grads, [counter.calls, counter.elements // 2]


def _hook_worker(rank: int, world: int) -> list[tuple[str, float, dict, dict, list[int]]]:
    out = []
    # bucket sizes in MB: tiny (many odd-sized buckets), mid, one bucket for the whole model
    for bucket_mb in (0.0007, 0.013, 25.0):
        ref, _ = _grads("allreduce", bucket_mb, rank, world)
        for hook in ("ring", "fp16", "powersgd"):
            got, counts = _grads(hook, bucket_mb, rank, world)
            out.append((hook, bucket_mb, got, ref, counts))
    return out


@pytest.mark.parametrize("world", [2, 3])
def test_ddp_hooks_give_the_backend_all_reduce_gradients(world: int) -> None:
    for result in run_distributed(_hook_worker, world):
        bucket_calls = {}
        for hook, bucket_mb, got, ref, (calls, elements) in result:
            tol = {"ring": 1e-6, "fp16": 2e-3, "powersgd": 1e-6}[
                hook
            ]  # powersgd: warm-up = allreduce
            for k in ref:
                torch.testing.assert_close(
                    got[k], ref[k], rtol=tol, atol=tol, msg=lambda m, k=k, h=hook: f"{h} {k}: {m}"
                )
            assert elements == sum(v.numel() for v in ref.values())
            bucket_calls[bucket_mb] = calls
        # the bucket sizes really differ: smaller buckets, more all-reduces
        assert bucket_calls[0.0007] > bucket_calls[25.0] >= 1
