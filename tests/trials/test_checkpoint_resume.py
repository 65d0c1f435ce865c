"""Exact resumption: stop at step 50, resume, and get the uninterrupted loss curve (D=1, D=2).

``train`` is a standalone training loop (tiny GPT with dropout, AdamW, a warm-up scheduler, a
GradScaler, the sharded token loader) checkpointing through ``save_trial_state`` and resuming
through ``load_trial_state``; it runs on real gloo processes.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch.nn import functional as F  # noqa: N812 - the usual name
from torch.nn.parallel import DistributedDataParallel

from hyperfleet.trials.checkpoint import CheckpointManager
from hyperfleet.trials.data import TokenLoader, prepare_corpus
from hyperfleet.trials.models.gpt import GPT, GPTConfig
from hyperfleet.trials.reshard import load_trial_state, save_trial_state
from tests.dist import run_distributed

SEQ = 16


def make_corpus(root: Path) -> Path:
    src = root / "corpus"
    src.mkdir(parents=True, exist_ok=True)
    text = "".join(f"def f{i}(x):\n    return x * {i} + {i % 7}\n" for i in range(400))
    (src / "a.py").write_text(text)
    return src


def train(rank: int, world: int, root: str, stop: int, checkpoint_at: int | None) -> dict[str, Any]:
    """Train to ``stop`` (resuming from ``root/ck`` if it holds a checkpoint)."""
    torch.use_deterministic_algorithms(True)
    corpus = prepare_corpus(
        Path(root) / "corpus", cache_dir=Path(root) / "cache", shard_tokens=2000
    )
    loader = TokenLoader(corpus, seq_len=SEQ, batch_size=4, rank=rank, world_size=world, seed=1)
    torch.manual_seed(0)
    model: torch.nn.Module = GPT(
        GPTConfig(seq_len=SEQ, n_layer=1, n_head=2, n_embd=32, dropout=0.1)
    )
    if world > 1:
        model = DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20))
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    parts = {
        "model": model,
        "optimizer": opt,
        "scheduler": sched,
        "scaler": scaler,
        "loader": loader,
    }
    mgr = CheckpointManager(Path(root) / "ck", keep=2, replica=Path(root) / "replica")
    resumed = load_trial_state(mgr, **parts)
    start = resumed[0] if resumed else 0
    if resumed is None:
        torch.manual_seed(100 + rank)  # a fresh trial: dropout differs per rank
    losses: dict[int, float] = {}
    for step in range(start + 1, stop + 1):
        x, y = loader.next_batch()
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        sched.step()
        mean = loss.detach().clone()
        if world > 1:
            dist.all_reduce(mean)
        losses[step] = mean.item() / world
        if step == checkpoint_at:
            save_trial_state(mgr, step, extra={"best": losses[step]}, **parts)
    inner = model.module if isinstance(model, DistributedDataParallel) else model
    params = torch.cat([p.detach().flatten() for p in inner.parameters()])
    moments = [opt.state[p]["exp_avg"].flatten() for p in inner.parameters() if p in opt.state]
    return {
        "start": start,
        "losses": losses,
        "params": params,
        "exp_avg": torch.cat(moments) if moments else None,
        "data": loader.state_dict(),
        "lr": sched.get_last_lr(),
    }


def stop_and_resume(rank: int, world: int, root: str) -> dict[str, Any]:
    """An uninterrupted run to 80 and a run stopped at 50 then resumed, on the same ranks.

    The resumed run builds every object afresh and scrambles the generators first, so all it
    knows of the first half is what the checkpoint holds (one spawn keeps the test quick).
    """
    full = train(rank, world, f"{root}/a", 80, None)
    first = train(rank, world, f"{root}/b", 50, 50)
    random.seed(12345)
    np.random.seed(12345)
    torch.manual_seed(12345)
    second = train(rank, world, f"{root}/b", 80, None)
    return {"full": full, "first": first, "second": second}


@pytest.mark.parametrize("world", [1, 2])
def test_stop_at_50_and_resume_matches_uninterrupted(tmp_path: Path, world: int) -> None:
    make_corpus(tmp_path / "a")
    make_corpus(tmp_path / "b")
    runs = run_distributed(stop_and_resume, world, str(tmp_path), timeout=240)[0]
    full, first, second = runs["full"], runs["first"], runs["second"]
    assert first["start"] == 0 and second["start"] == 50
    assert sorted(second["losses"]) == list(range(51, 81)), "no step reported twice"
    curve = {**first["losses"], **second["losses"]}
    diff = max(abs(curve[s] - full["losses"][s]) for s in range(1, 81))
    assert diff <= 1e-6, f"max abs loss difference {diff}"
    assert torch.equal(second["params"], full["params"])
    assert second["data"] == full["data"]
