"""``TrialContext``'s parallelism and full-state helpers on real gloo processes.

A pipelined trial's state (P=2, each rank holding half the layers) is gathered under the unsplit
model's keys, so it restores into a plain single-process model and into a pipeline again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.nn import functional as F  # noqa: N812 - the usual name

from hyperfleet.spec.trial import TrialConfig
from hyperfleet.trials.checkpoint import CheckpointManager
from hyperfleet.trials.context import TrialContext
from hyperfleet.trials.distributed import DistEnv
from hyperfleet.trials.models.gpt import GPT, GPTConfig
from tests.dist import run_distributed

CFG = GPTConfig(seq_len=8, n_layer=2, n_head=2, n_embd=16)


def make_ctx(rank: int, world: int, root: str, pipeline: int, every: int | None = None) -> Any:
    trial = TrialConfig.model_validate({
        "workload": "charlm", "steps": 10, "resources": {"devices": world},
        "parallel": {"data": world // pipeline, "pipeline": pipeline, "microbatches": 2},
        "checkpoint": {"every": every},
    })  # fmt: skip
    return TrialContext(
        params={}, env=DistEnv(rank, world, rank, torch.device("cpu"), "gloo"), max_steps=10,
        eval_every=5, trial_number=0, sweep="t", config=trial, workdir=Path(root),
        checkpoints=CheckpointManager(Path(root) / "ck"), checkpoint_every=every,
    )  # fmt: skip


def loss_fn(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), y.flatten())


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    t = torch.randint(0, 256, (4, CFG.seq_len + 1), generator=g)
    return t[:, :-1], t[:, 1:]


def adam(params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=1e-2)


def pipelined(rank: int, world: int, root: str) -> dict[str, Any]:
    ctx = make_ctx(rank, world, root, pipeline=2, every=5)
    torch.manual_seed(0)
    runner = ctx.pipeline(GPT(CFG).layers(), loss_fn, adam)
    x, y = batch()
    for _ in range(2):
        runner.train_step(x, y)
    not_due = ctx.state(3, model=runner)
    state = ctx.state(5, model=runner)
    mine = {
        f"{i}.{k}": v.detach().clone()
        for s in runner.stage_ids
        for i in range(runner.bounds[s], runner.bounds[s + 1])
        for k, v in runner.layers[i].state_dict().items()
    }
    # restore into a fresh pipeline: the same weights come back on every stage
    torch.manual_seed(1)
    again = ctx.pipeline(GPT(CFG).layers(), loss_fn, adam)
    if ctx.is_main:
        ctx.checkpoints.save(5, state)
    torch.distributed.barrier()
    step = ctx.restore(ctx.checkpoints.load(5), model=again)
    back = {
        f"{i}.{k}": v.detach().clone()
        for s in again.stage_ids
        for i in range(again.bounds[s], again.bounds[s + 1])
        for k, v in again.layers[i].state_dict().items()
    }
    loss_after = again.train_step(x, y).loss
    loss_orig = runner.train_step(x, y).loss
    return {"not_due": not_due, "state": state, "mine": mine, "back": back, "step": step,
            "loss_after": loss_after, "loss_orig": loss_orig}  # fmt: skip


def test_pipeline_state_gathers_under_unsplit_keys_and_restores_anywhere(tmp_path: Path) -> None:
    out = run_distributed(pipelined, 2, str(tmp_path), timeout=240)
    assert out[0]["not_due"] is None and out[1]["not_due"] is None
    state = out[0]["state"]
    assert out[1]["state"] is None, "the state lives on rank 0 only"
    unsplit = GPT(CFG)
    assert set(state["model"]) == set(unsplit.state_dict())
    for rank_out in out:
        for name, value in rank_out["mine"].items():
            assert torch.equal(state["model"][name], value)
            assert torch.equal(rank_out["back"][name], value)
        assert rank_out["step"] == 5
        assert rank_out["loss_after"] == rank_out["loss_orig"]
    assert len(state["rng"]) == 2 and state["world_size"] == 2

    # the same state into one plain process (no pipeline): weights and Adam moments
    ctx = make_ctx(0, 1, str(tmp_path / "one"), pipeline=1)
    torch.manual_seed(3)
    model = ctx.wrap(GPT(CFG))
    opt = adam(list(model.parameters()))
    assert ctx.restore(state, model=model, optimizer=opt) == 5
    for name, value in model.state_dict().items():
        assert torch.equal(value, state["model"][name])
    named = dict(model.named_parameters())
    for name, moments in state["optimizer"]["state"].items():
        assert torch.equal(opt.state[named[name]]["exp_avg"], moments["exp_avg"])


def single(rank: int, world: int, root: str) -> dict[str, Any]:
    """Two data replicas: helpers delegate to one Parallelism; report takes None off rank 0."""
    ctx = make_ctx(rank, world, root, pipeline=1, every=None)
    torch.manual_seed(0)
    model = ctx.wrap(GPT(CFG))
    opt = adam(list(model.parameters()))
    x, y = batch()
    with ctx.autocast():
        loss = loss_fn(model(x[rank::2]), y[rank::2])
    out = ctx.backward_step(loss, opt)
    assert out is not None
    mean = ctx.mean_over_data(out.loss)
    ckpt = ctx.state(1, model=model, optimizer=opt)
    ctx.report(1, {"loss": mean}, checkpoint=ckpt)
    return {"mean": mean, "local": out.loss, "has_state": ckpt is not None}


def test_data_parallel_helpers_and_report(tmp_path: Path) -> None:
    out = run_distributed(single, 2, str(tmp_path), timeout=240)
    assert out[0]["mean"] == out[1]["mean"]
    assert abs(out[0]["mean"] - (out[0]["local"] + out[1]["local"]) / 2) < 1e-6
    assert [o["has_state"] for o in out] == [True, False]
    assert CheckpointManager(tmp_path / "ck").steps() == [1]


def test_restore_keeps_this_runs_optimizer_hyperparameters(tmp_path: Path) -> None:
    """A PBT member restored from a donor's checkpoint trains with its explored lr, not the
    donor's (``Optimizer.load_state_dict`` alone would put the donor's back)."""
    ctx = make_ctx(0, 1, str(tmp_path), pipeline=1)
    torch.manual_seed(0)
    donor = torch.nn.Linear(4, 2)
    donor_opt = torch.optim.AdamW(donor.parameters(), lr=0.1, weight_decay=0.01)
    donor(torch.ones(3, 4)).sum().backward()
    donor_opt.step()
    state = ctx.state(1, model=donor, optimizer=donor_opt, force=True)
    member = torch.nn.Linear(4, 2)
    member_opt = torch.optim.AdamW(member.parameters(), lr=0.5, weight_decay=0.02)
    assert ctx.restore(state, model=member, optimizer=member_opt) == 1
    assert member_opt.param_groups[0]["lr"] == 0.5
    assert member_opt.param_groups[0]["weight_decay"] == 0.02
    assert torch.equal(member.weight, donor.weight)  # the weights and moments are the donor's
    assert member_opt.state_dict()["state"][0]["step"] == 1
