"""``digits``: an MLP classifier on scikit-learn's bundled 8x8 digits (1,797 images).

The split (80% train, 20% validation) and the batch order are deterministic functions of
``seed`` and the step, so a trial resumed from a checkpoint sees exactly the batches it would
have seen. Data parallel: each rank trains on its slice of every global batch; DDP averages
the gradients. Metrics: ``loss`` (train), ``val_loss``, ``val_accuracy``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from hyperfleet.trials.context import TrialContext
from hyperfleet.trials.workloads.common import checked_params, rank_slice, unwrap, wrap_ddp

_ACTS = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh}


def load_split(seed: int) -> tuple[torch.Tensor, ...]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(seed).permutation(len(x))
    x = torch.tensor(x[order] / 16.0, dtype=torch.float32)
    y = torch.tensor(y[order], dtype=torch.long)
    cut = int(0.8 * len(x))
    return x[:cut], y[:cut], x[cut:], y[cut:]


def build_model(hidden: int, act: str) -> nn.Module:
    if act not in _ACTS:
        raise ValueError(f"digits: act must be one of {', '.join(_ACTS)}, got {act!r}")
    a = _ACTS[act]
    return nn.Sequential(
        nn.Linear(64, hidden), a(), nn.Linear(hidden, hidden), a(), nn.Linear(hidden, 10)
    )


def batch_indices(n: int, batch: int, step: int, seed: int) -> np.ndarray:
    """Indices of the global batch of ``step`` (0-based): epochs of seeded permutations."""
    per_epoch = n // batch
    epoch, pos = divmod(step, per_epoch)
    perm = np.random.default_rng([seed, epoch]).permutation(n)
    return perm[pos * batch : (pos + 1) * batch]


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    model.eval()
    logits = model(x)
    model.train()
    return {
        "val_loss": float(F.cross_entropy(logits, y)),
        "val_accuracy": float((logits.argmax(1) == y).float().mean()),
    }


def main(ctx: TrialContext) -> None:
    p: dict[str, Any] = checked_params("digits", ctx.params)
    torch.manual_seed(p["seed"])
    xtr, ytr, xva, yva = (t.to(ctx.device) for t in load_split(p["seed"]))
    model = build_model(int(p["hidden"]), str(p["act"])).to(ctx.device)
    opt = torch.optim.AdamW(model.parameters(), lr=p["lr"], weight_decay=p["weight_decay"])
    state = ctx.load_checkpoint()
    step = 0
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        step = int(state["step"])
    ddp = wrap_ddp(model, ctx.world_size, ctx.device)
    batch = int(p["batch_size"])
    mine = rank_slice(batch, ctx.rank, ctx.world_size)
    while step < ctx.max_steps:
        idx = torch.as_tensor(batch_indices(len(xtr), batch, step, p["seed"])[mine])
        loss = F.cross_entropy(ddp(xtr[idx]), ytr[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        if ctx.should_eval(step):
            metrics = {"loss": loss.item(), **evaluate(unwrap(ddp), xva, yva)}
            ckpt = {"step": step, "model": unwrap(ddp).state_dict(), "optim": opt.state_dict()}
            ctx.report(step, metrics, checkpoint=ckpt)
