"""Train a small MLP on scikit-learn's digits with PyTorch DDP: a plain training script.

It knows nothing of hyperfleet. Run it alone, or as a DDP job on 2 processes::

    python examples/script/train.py --lr 0.05 --hidden 64
    torchrun --nproc-per-node 2 examples/script/train.py --lr 0.05 --hidden 64

Every ``--eval-every`` steps rank 0 prints ``step=N val_loss=X val_accuracy=Y``. With
``--checkpoint-dir`` it saves its state there at each evaluation and, started again, goes on
from the newest one. ``examples/script/sweep.yaml`` sweeps it as it is.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=64, help="per process")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--eval-every", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint-dir", type=Path, default=None)
    return p.parse_args()


def data(seed: int) -> tuple[torch.Tensor, ...]:
    """Digits (8x8 images as 64 features in [0, 1]), a fixed 80/20 split."""
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x, dtype=torch.float32) / 16.0
    y = torch.tensor(y, dtype=torch.long)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    cut = int(0.8 * len(x))
    return x[order[:cut]], y[order[:cut]], x[order[cut:]], y[order[cut:]]


def latest(directory: Path | None) -> Path | None:
    found = sorted(directory.glob("step-*.pt")) if directory and directory.is_dir() else []
    return found[-1] if found else None


def main() -> None:
    args = parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if world > 1 else 0
    torch.manual_seed(args.seed)
    x_train, y_train, x_val, y_val = data(args.seed)
    print(f"rank {rank} of {world}: {len(x_train)} training examples", flush=True)
    model: nn.Module = nn.Sequential(
        nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    start = 0
    resume = latest(args.checkpoint_dir)
    if resume is not None:
        state = torch.load(resume, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = int(state["step"])
        print(f"rank {rank}: resumed from {resume.name}", flush=True)
    ddp = DistributedDataParallel(model) if world > 1 else model
    batches = torch.Generator().manual_seed(args.seed * 1000 + rank)
    for step in range(start + 1, args.steps + 1):
        pick = torch.randint(len(x_train), (args.batch_size,), generator=batches)
        loss = nn.functional.cross_entropy(ddp(x_train[pick]), y_train[pick])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % args.eval_every == 0 or step == args.steps:
            with torch.no_grad():
                logits = model(x_val)
                val_loss = nn.functional.cross_entropy(logits, y_val).item()
                accuracy = (logits.argmax(1) == y_val).float().mean().item()
            if rank == 0:
                print(
                    f"step={step} val_loss={val_loss:.4f} val_accuracy={accuracy:.4f}", flush=True
                )
                if args.checkpoint_dir is not None:
                    args.checkpoint_dir.mkdir(parents=True, exist_ok=True)
                    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
                    torch.save({**state, "step": step}, args.checkpoint_dir / f"step-{step:06d}.pt")
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
