"""Pipeline (GPipe, 1F1B, interleaved) and hybrid data x pipeline against the unsplit model."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import torch

from hyperfleet.spec.trial import CommConfig, ParallelConfig
from hyperfleet.trials.parallel.mesh import Layout, build_groups
from hyperfleet.trials.parallel.precision import MixedPrecision
from tests.dist import run_distributed
from tests.trials.parallel.common import CFG, batch, gpt_loss, tiny_gpt

if TYPE_CHECKING:  # torch.distributed.pipelining takes seconds to import: only where it runs
    from hyperfleet.trials.parallel.pipeline import PipelineRunner

CPU = torch.device("cpu")
LR = 0.05


def _sgd(ps: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.SGD(ps, lr=LR)


def _runner(
    parallel: ParallelConfig, world: int, mp: MixedPrecision | None = None
) -> tuple[PipelineRunner, list[torch.nn.Module]]:
    from hyperfleet.trials.parallel.pipeline import PipelineRunner

    groups = build_groups(Layout.from_config(parallel, world), "cpu")
    layers = tiny_gpt().layers()
    mp = mp or MixedPrecision("fp32", CPU)
    return PipelineRunner(layers, gpt_loss, _sgd, parallel, CommConfig(), groups, mp, CPU), layers


def _named_grads(runner: PipelineRunner, layers: list[torch.nn.Module]) -> dict[str, torch.Tensor]:
    out = {}
    for s in runner.stage_ids:
        for i in range(runner.bounds[s], runner.bounds[s + 1]):
            for name, p in layers[i].named_parameters():
                out[f"{i}.{name}"] = p.grad.detach().clone()
    return out


def _grads_worker(rank: int, world: int, parallel: ParallelConfig) -> tuple[float, dict]:
    runner, layers = _runner(parallel, world)
    x, y = batch(8)
    loss = runner.forward_backward(x, y)
    return float(loss.item()), _named_grads(runner, layers)


def _reference_grads() -> tuple[float, dict[str, torch.Tensor]]:
    model = tiny_gpt()
    x, y = batch(8)
    loss = gpt_loss(model(x), y)
    loss.backward()
    return float(loss.detach()), {k: p.grad for k, p in model.named_parameters()}


@pytest.mark.parametrize(
    "parallel",
    [
        ParallelConfig(pipeline=2, microbatches=4, schedule="gpipe"),
        ParallelConfig(pipeline=2, microbatches=4, schedule="1f1b"),
        ParallelConfig(pipeline=2, microbatches=2, schedule="interleaved-1f1b"),
    ],
    ids=lambda p: p.schedule,
)
def test_pipeline_loss_and_grads_match_the_unsplit_model(parallel: ParallelConfig) -> None:
    ref_loss, ref_grads = _reference_grads()
    results = run_distributed(_grads_worker, 2, parallel)
    grads: dict[str, torch.Tensor] = {}
    for loss, g in results:
        assert loss == pytest.approx(ref_loss, rel=1e-5)
        assert not grads.keys() & g.keys(), "a layer must live on exactly one rank"
        grads.update(g)
    assert grads.keys() == ref_grads.keys()
    for k in ref_grads:
        torch.testing.assert_close(grads[k], ref_grads[k], rtol=1e-4, atol=1e-6)


def _hybrid_worker(rank: int, world: int, steps: int) -> tuple[list[float], dict, int]:
    parallel = ParallelConfig(data=2, pipeline=2, microbatches=2, schedule="1f1b")
    runner, layers = _runner(parallel, world)
    losses = []
    for step in range(steps):
        x, y = batch(8, seed=step)
        d = runner.groups.data_rank
        losses.append(runner.train_step(x.chunk(2)[d], y.chunk(2)[d]).loss)
    state = {}
    for s in runner.stage_ids:
        for i in range(runner.bounds[s], runner.bounds[s + 1]):
            for name, p in layers[i].named_parameters():
                state[f"{i}.{name}"] = p.detach().clone()
    return losses, state, runner.groups.data_rank


def test_hybrid_data2_pipeline2_trains_and_matches_the_unsplit_model() -> None:
    steps = 3
    model = tiny_gpt()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    ref_losses = []
    for step in range(steps):
        x, y = batch(8, seed=step)
        loss = gpt_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        ref_losses.append(float(loss.detach()))
    ref = {k: p.detach() for k, p in model.named_parameters()}
    results = run_distributed(_hybrid_worker, 4, steps)
    for d in (0, 1):
        merged: dict[str, torch.Tensor] = {}
        for losses, state, data_rank in results:
            torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses))
            if data_rank == d:
                merged.update(state)
        assert merged.keys() == ref.keys()
        for k in ref:
            torch.testing.assert_close(merged[k], ref[k], rtol=1e-4, atol=1e-6)
    assert ref_losses[-1] < ref_losses[0]


def _fp16_overflow_worker(rank: int, world: int) -> dict[str, list]:
    """fp16 1F1B; at step 1 the last stage's gradients hold an inf (its own, not the other's)."""
    mp = MixedPrecision("fp16", CPU, init_scale=1024.0)
    runner, _ = _runner(ParallelConfig(pipeline=2, microbatches=2, schedule="1f1b"), world, mp)
    step = {"now": 0}
    if rank == world - 1:
        first = runner.parameters()[0]
        first.register_hook(lambda g: torch.full_like(g, float("inf")) if step["now"] == 1 else g)
    x, y = batch(8, seed=3)  # one fixed batch: the loss must go down
    out: dict[str, list] = {"skipped": [], "scales": [], "unchanged": [], "losses": []}
    for step["now"] in range(8):
        before = [q.detach().clone() for q in runner.parameters()]
        result = runner.train_step(x, y)
        out["skipped"].append(result.skipped)
        out["scales"].append(mp.loss_scale)
        after = runner.parameters()
        out["unchanged"].append(all(torch.equal(b, a) for b, a in zip(before, after, strict=True)))
        out["losses"].append(result.loss)
    return out


def test_fp16_pipeline_stages_skip_an_overflow_together_and_train() -> None:
    """Only the last stage sees the inf; the shared verdict makes the first skip too."""
    first, last = run_distributed(_fp16_overflow_worker, 2)
    expected = [i == 1 for i in range(8)]
    assert first["skipped"] == last["skipped"] == expected
    assert first["unchanged"] == last["unchanged"] == expected
    assert first["scales"] == last["scales"] == [1024.0] + [512.0] * 7
    assert first["losses"] == last["losses"]
    assert last["losses"][-1] < last["losses"][0], last["losses"]


def test_partition_balances_cost_not_layer_count() -> None:
    from hyperfleet.trials.parallel.pipeline import layer_costs, partition

    assert partition([1, 1, 1, 1], 2) == [0, 2, 4]
    assert partition([10, 1, 1, 1, 1], 2) == [0, 1, 5]  # equal counts would be 3 + 2
    assert partition([1, 2, 3, 4, 5, 6], 3) == [0, 3, 5, 6]
    b = partition(layer_costs(tiny_gpt().layers()), 2)
    assert len(b) == 3 and b[0] == 0 and b[-1] == CFG.n_layer + 2
    with pytest.raises(ValueError):
        partition([1.0], 2)
