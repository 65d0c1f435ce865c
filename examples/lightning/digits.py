"""A Lightning module on scikit-learn's digits, tuned by hyperfleet through its callback.

Run from the repository root: ``hyperfleet sweep run examples/lightning/sweep.yaml``.

``main(ctx)`` is all a workload adds to an ordinary Lightning script: a
:class:`~hyperfleet.integrations.lightning.HyperfleetCallback`, its ``trainer_kwargs()`` and its
``ckpt_path``. The training stream is a pure function of the trainer's step (batch ``k`` of
rank ``r`` is the same rows whenever it is drawn), built when fitting starts, after Lightning
restored a checkpoint: a resumed trial continues on exactly the data it would have seen.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812
from torch.utils.data import DataLoader, TensorDataset

from hyperfleet.integrations.lightning import HyperfleetCallback
from hyperfleet.trials.context import TrialContext
from hyperfleet.trials.workloads.digits import build_model, load_split

PARAMS = {"lr": 0.01, "hidden": 32, "batch_size": 32, "seed": 0, "decay": 1.0}


class DigitsStream:
    """Endless training batches for ``rank`` of ``world``, from batch ``start`` on: each pass
    over the data is a permutation seeded by ``(seed, pass)``, cut into ``world`` shards."""

    def __init__(self, x: np.ndarray, y: np.ndarray, batch: int, seed: int, rank: int,
                 world: int, start: int) -> None:  # fmt: skip
        self.x, self.y = torch.from_numpy(x), torch.from_numpy(y)
        self.batch, self.seed, self.rank, self.world, self.start = batch, seed, rank, world, start

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        per_pass = len(self.x) // (self.batch * self.world)
        k = self.start
        while True:
            epoch, pos = divmod(k, per_pass)
            order = np.random.default_rng((self.seed, epoch)).permutation(len(self.x))
            first = (pos * self.world + self.rank) * self.batch
            rows = torch.from_numpy(order[first : first + self.batch])
            yield self.x[rows], self.y[rows]
            k += 1


class DigitsModule(pl.LightningModule):
    """A 3-layer MLP; ``decay``: the learning rate's factor per 100 steps (a LambdaLR)."""

    def __init__(self, lr: float, hidden: int, batch_size: int, seed: int, decay: float) -> None:
        super().__init__()
        torch.manual_seed(seed)  # the same initial weights on every rank
        self.lr, self.batch_size, self.seed, self.decay = lr, batch_size, seed, decay
        self.net = build_model(hidden, "relu")
        xtr, ytr, xva, yva = load_split(seed)
        self.train_xy = (xtr, ytr)
        self.val_xy = (torch.from_numpy(xva), torch.from_numpy(yva))

    def train_dataloader(self) -> Any:
        start = self.global_step * self.trainer.accumulate_grad_batches
        return DigitsStream(*self.train_xy, self.batch_size, self.seed, self.global_rank,
                            self.trainer.world_size, start)  # fmt: skip

    def val_dataloader(self) -> Any:
        x, y = self.val_xy  # one batch; Lightning shards it over the ranks
        return DataLoader(TensorDataset(x, y), batch_size=len(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self.net(x)
        self.log("loss", F.cross_entropy(logits, y), sync_dist=True)
        self.log("accuracy", (logits.argmax(1) == y).float().mean(), sync_dist=True)

    def on_validation_epoch_end(self) -> None:
        # the learning rate the optimizer steps with now (after any exploit and schedule)
        self.log("lr", self.optimizers().optimizer.param_groups[0]["lr"])
        self.log("world_size", float(self.trainer.world_size))

    def configure_optimizers(self) -> Any:
        opt = torch.optim.AdamW(self.parameters(), lr=self.lr)
        if self.decay == 1.0:
            return opt
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: self.decay ** (s / 100))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def module_of(ctx: TrialContext) -> DigitsModule:
    p = {**PARAMS, **ctx.params}
    return DigitsModule(float(p["lr"]), int(p["hidden"]), int(p["batch_size"]), int(p["seed"]),
                        float(p["decay"]))  # fmt: skip


def main(ctx: TrialContext) -> None:
    cb = HyperfleetCallback(ctx)
    trainer = pl.Trainer(callbacks=[cb], max_steps=ctx.max_steps, **cb.trainer_kwargs())
    trainer.fit(module_of(ctx), ckpt_path=cb.ckpt_path)


main.hyperfleet_params = PARAMS  # type: ignore[attr-defined]
